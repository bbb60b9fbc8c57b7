"""Backtest runs: a fleet's history from Prometheus (`query_range`), or from a file.

From Prometheus: the engines behind the selector over the range are found first (the group
label's values), then replayed a batch of engines at a time, each batch over windows of at
most 11,000 points (Prometheus's limit per series) and about two million values per answer,
so memory stays flat however long the range or large the fleet. The three queries are the
live watch's (`stallkit.monitor.prometheus.queries.FleetQuery`), as range queries; an engine's scrape times come
with its series, so a step shorter than the scrape interval never reads one scrape twice.
From a file: OpenMetrics text with a timestamp on each sample (what promtool backfills; a
recorded timeline converts to it with `stallkit.monitor.prometheus.series.openmetrics_text`,
AIPerf's server-metrics export with `stallkit.monitor.backtest.aiperf`), replayed at its own
sample times. `replay_alerts()` evaluates the generated alert rules over a range
the same way (Prometheus evaluates each alert's expression; `stallkit.monitor.prometheus.alert_replay` applies
`for:`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from stallkit.contract import names
from stallkit.contract.errors import read_text
from stallkit.contract.fleet import AlertFiring
from stallkit.monitor.backtest.aiperf import aiperf_openmetrics, is_aiperf_record
from stallkit.monitor.backtest.replay import BacktestTally, fill_gaps, replay_engine
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.fleet.bank import FleetBank
from stallkit.monitor.prometheus.alert_replay import AlertReplay
from stallkit.monitor.prometheus.client import PrometheusClient
from stallkit.monitor.prometheus.queries import (
    FleetQuery,
    engine_labels,
    grid,
    parse_duration,
    plan_batches,
    readings,
    split_range,
)
from stallkit.monitor.prometheus.series import openmetrics_text
from stallkit.monitor.signals.dialects import DIALECTS

Progress = Callable[[int, int], None]


async def discover(
    client: PrometheusClient, query: FleetQuery, start: float, end: float
) -> list[str]:
    """The engines (group label values) with a running gauge (in any dialect read) in
    [start, end]."""
    sel = ", ".join(p for p in (query.running_matcher(), query.selector) if p)
    return sorted(await client.label_values(query.group_by, "{" + sel + "}", start, end))


async def backtest_prometheus(
    client: PrometheusClient,
    query: FleetQuery,
    config: MonitorConfig,
    start: float,
    end: float,
    step_s: float,
    *,
    budget: int = 2_000_000,
    progress: Progress | None = None,
) -> BacktestTally:
    """Replay the detector over every engine's history in [start, end]."""
    await client.check()
    engines = await discover(client, query, start, end)
    tally = BacktestTally()
    points = len(grid(start, end, step_s))
    per_batch, window = plan_batches(len(engines), points, budget)
    windows = split_range(start, end, step_s, window)
    for first in range(0, len(engines), per_batch):
        batch = engines[first : first + per_batch]
        bank = FleetBank(config, gpu=query.gpu)
        seen: dict[str, float] = {}
        labels: dict[str, dict[str, str]] = {}
        for w_start, w_end in windows:
            series, times, gpus = await asyncio.gather(
                client.query_range(query.series(batch), w_start, w_end, step_s),
                client.query_range(query.times(batch), w_start, w_end, step_s),
                client.query_range(query.gpus(batch), w_start, w_end, step_s)
                if query.gpu
                else _nothing(),
            )
            for key, found in engine_labels(series, query.group_by).items():
                labels.setdefault(key, found)
            per = readings(
                series, times, gpus if query.gpu else None, query.group_by, query.dialect
            )
            window_grid = grid(w_start, w_end, step_s)
            for key in batch:
                points_of = per.get(key, {})
                if key not in seen and points_of:
                    seen[key] = min(points_of)
                filled = fill_gaps(points_of, window_grid, seen.get(key))
                for event in replay_engine(bank, key, filled, labels.get(key, {})):
                    tally.handle(event)
        if progress is not None:
            progress(min(first + per_batch, len(engines)), len(engines))
    return tally


async def _nothing() -> list[dict[str, Any]]:
    return []


def _as_results(
    text: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """OpenMetrics text as the three answers of a range query (series, times, GPUs)."""
    series: dict[tuple[tuple[str, str], ...], list[list[float]]] = {}
    try:
        for family in text_string_to_metric_families(text):  # type: ignore[no-untyped-call]
            for sample in family.samples:
                if sample.timestamp is None:
                    raise MonitorError(
                        f"sample {sample.name} has no timestamp",
                        hint="a backtest file needs a timestamp on every sample",
                    )
                labels = {**sample.labels, "__name__": sample.name}
                key = tuple(sorted(labels.items()))
                series.setdefault(key, []).append([float(sample.timestamp), sample.value])
    except ValueError as exc:
        raise MonitorError(
            f"not OpenMetrics text: {exc}", hint="end the file with `# EOF`; see --help"
        ) from None
    vllm: list[dict[str, Any]] = []
    gpu: list[dict[str, Any]] = []
    for key, values in series.items():
        entry = {"metric": dict(key), "values": values}
        (gpu if dict(key)["__name__"] == names.DCGM_GPU_UTIL else vllm).append(entry)
    return vllm, [], gpu


def _times(
    series: Sequence[Mapping[str, Any]], group_by: str, running: Sequence[str]
) -> list[dict[str, Any]]:
    """Each engine's scrape times: the times of its running gauge and its `up`."""
    stamps: dict[str, set[float]] = {}
    clocks = {"up", *running}
    for item in series:
        labels = item["metric"]
        if labels.get("__name__") in clocks and group_by in labels:
            stamps.setdefault(labels[group_by], set()).update(ts for ts, _v in item["values"])
    return [
        {"metric": {group_by: key}, "values": [[ts, ts] for ts in sorted(values)]}
        for key, values in stamps.items()
    ]


def _check_dialect(sample_names: set[str], query: FleetQuery) -> None:
    """A history with no series of the dialect read (any dialect, unless one is forced)."""
    dialects = DIALECTS if query.dialect is None else (query.dialect,)
    if not any(d.owns(name) for d in dialects for name in sample_names):
        wanted = ", ".join(d.name for d in dialects)
        raise MonitorError(
            f"no engine series in the file in a dialect read ({wanted})",
            hint="--dialect NAME for its engine's names (vllm, sglang, llamacpp, tgi)",
        )


def backtest_openmetrics(
    text: str, query: FleetQuery, config: MonitorConfig
) -> tuple[BacktestTally, float, float]:
    """Replay an OpenMetrics file; the tally and the time range its samples cover."""
    series, _none, gpus = _as_results(text)
    if not series:
        raise MonitorError("no samples in the file", hint="is it OpenMetrics text with `# EOF`?")
    _check_dialect({item["metric"]["__name__"] for item in series}, query)
    times = _times(series, query.group_by, query.running_names())
    per = readings(series, times, gpus if query.gpu else None, query.group_by, query.dialect)
    labels = engine_labels(series, query.group_by)
    bank = FleetBank(config, gpu=query.gpu)
    tally = BacktestTally()
    for key in sorted(per):
        for event in replay_engine(bank, key, per[key], labels.get(key, {})):
            tally.handle(event)
    stamps = [ts for item in times for ts, _v in item["values"]]
    return tally, min(stamps, default=0.0), max(stamps, default=0.0)


async def replay_alerts(
    client: PrometheusClient,
    document: Mapping[str, Any],
    start: float,
    end: float,
    step_s: float,
    group_by: str,
) -> list[AlertFiring]:
    """Every alert of a rules document (`stallkit.monitor.prometheus.rules.rules_document`) over [start, end],
    its expression evaluated by Prometheus every `step_s` (the evaluation interval)."""
    await client.check()
    out: list[AlertFiring] = []
    for group in document.get("groups", []):
        for rule in group.get("rules", []):
            if "alert" not in rule:
                continue
            hold = parse_duration(rule["for"], "for") if rule.get("for") else 0.0
            replay = AlertReplay(rule["alert"], hold, rule.get("labels", {}), group_by)
            for w_start, w_end in split_range(start, end, step_s):
                result = await client.query_range(rule["expr"], w_start, w_end, step_s)
                replay.feed(result, grid(w_start, w_end, step_s))
            out.extend(replay.finish())
    return sorted(out, key=lambda a: (a.active, a.alert, a.engine))


def history_text(path: Path) -> str:
    """A history file as OpenMetrics text: as it is, AIPerf's server-metrics export converted
    (its engines named by their host:port), or a run's timeline.jsonl converted (its engine
    named by its directory, its times the timeline's seconds). MonitorError (one line with a
    hint) for a file that cannot be read or JSON lines that are neither."""
    text = read_text(path, MonitorError)
    if path.suffix != ".jsonl":
        return text
    try:
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise MonitorError(
            f"{path}: not JSON lines: {exc}",
            "give a run's timeline.jsonl or AIPerf's server_metrics_export.jsonl",
        ) from None
    if records and is_aiperf_record(records[0]):
        return aiperf_openmetrics(records)
    return openmetrics_text({path.parent.name or path.stem: records}, 0.0)
