"""What the fleet monitor asks Prometheus, and what its answers mean per engine. Pure.

A fleet is read with three queries per instant (or per range window): the engines' own
series (every sample name the monitor reads, plus `up`, raw: counters stay counters), the
time of each engine's last scrape (`timestamp()`, so a sample Prometheus has not refreshed
since the last query is not read twice as "no progress"), and DCGM's GPU utilisation. An
engine is what one value of the group label (`instance` by default, or `pod`, ...) names;
DCGM's series join their engine on that label. Answers are turned into per-engine readings
at each scrape time: a `MetricsSnapshot` built as from a /metrics page (the per-`engine`
view kept), or none with the reason when the target was down (`up` 0). A range is split
into windows of at most 11,000 points per series, Prometheus's limit for `query_range`.

A fourth query, the user's (`--pending-query`), may say what a gateway or frontend in front
of the engines has in flight (a Dynamo frontend's inflight gauge, an Envoy or gateway
counter): requests its clients wait on, pending work whatever the engine's own gauges read.
Its answer joins each engine on the group label alone: a series counts for the engine whose
group value it carries, whatever its other labels (the gateway's own `job`, say). Write the
query so that it does: `sum by (instance) (...)` where the gateway labels its series with
the engine's instance, or `label_replace` a gateway's own label (its upstream, its worker)
into the group label; with `--group-by job`, a frontend per job of engines. A series without
the group label names no engine and is not counted (a fleet-wide total cannot say which
engine holds the requests, and counted against every engine it would flag idle ones).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stallkit.contract import names
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.prometheus.rules import (
    _MATCHERS,  # one grammar of label matchers for rules and queries
)
from stallkit.monitor.signals.dialects import DIALECTS, Dialect
from stallkit.monitor.signals.parse import MetricsSnapshot, sample_names, snapshot_from_samples

#: Prometheus refuses a `query_range` that would give more points than this per series.
MAX_POINTS = 11_000
#: the group label's name, as PromQL allows it
_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def matchers(selector: str, what: str = "--selector") -> str:
    """The label matchers inside `{...}` (braces optional), checked; raises `MonitorError`."""
    inner = selector.strip().removeprefix("{").removesuffix("}").strip().rstrip(",")
    if not _MATCHERS.match(inner):
        raise MonitorError(
            f"{what} {selector!r} is not a list of PromQL label matchers",
            hint='e.g. {job="vllm", namespace=~"prod-.*"}',
        )
    return inner


def label_name(value: str) -> str:
    """A label name (the group label), checked; raises `MonitorError`."""
    if not _LABEL.match(value):
        raise MonitorError(
            f"--group-by {value!r} is not a label name", hint="e.g. instance, pod or job"
        )
    return value


def _sel(*parts: str) -> str:
    return "{" + ", ".join(p for p in parts if p) + "}"


def _name_matcher(metric_names: Sequence[str]) -> str:
    """`__name__="x"` for one name, `__name__=~"x|y"` for several."""
    if len(metric_names) == 1:
        return f'__name__="{metric_names[0]}"'
    return f'__name__=~"{"|".join(re.escape(n) for n in metric_names)}"'


def _regex_of(values: Iterable[str]) -> str:
    """A PromQL `=~` string matching exactly `values` (RE2 escapes, then string escapes)."""
    alternatives = "|".join(re.escape(v) for v in sorted(values))
    return '"' + alternatives.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True, slots=True)
class FleetQuery:
    """Which engines (selector), how they are told apart (group label), which GPUs."""

    selector: str = ""
    group_by: str = "instance"
    gpu_selector: str = ""
    gpu: bool = True
    dialect: Dialect | None = None  # None: each engine's own, from its series
    pending: str | None = None  # PromQL of what the clients wait on, per engine (see above)

    def running_names(self) -> tuple[str, ...]:
        """The running gauges' names (the dialect's, or every dialect's)."""
        dialects = DIALECTS if self.dialect is None else (self.dialect,)
        return tuple(s.name for d in dialects for s in d.field_series("running"))

    def running_matcher(self) -> str:
        """The `__name__` matcher of the running gauges."""
        return _name_matcher(self.running_names())

    def _engines(self, only: Iterable[str] | None) -> str:
        if only is None:
            return self.selector
        return ", ".join(p for p in (self.selector, f"{self.group_by}=~{_regex_of(only)}") if p)

    def series(self, only: Iterable[str] | None = None) -> str:
        """The engines' own series and `up` (`only`: these engines' group values alone)."""
        wanted = "|".join(re.escape(n) for n in ("up", *sample_names(self.dialect)))
        return _sel(f'__name__=~"{wanted}"', self._engines(only))

    def times(self, only: Iterable[str] | None = None) -> str:
        """Each engine's last scrape time: its running gauge's, or while its engine series are
        gone (target down), its `up`'s."""
        sel = self._engines(only)
        by = f"max by ({self.group_by})"
        running = _sel(self.running_matcher(), sel)
        return f"{by} (timestamp({running})) or {by} (timestamp(up{_sel(sel)}))"

    def gpus(self, only: Iterable[str] | None = None) -> str:
        """DCGM's GPU utilisation of the engines (joined on the group label)."""
        extra = None if only is None else f"{self.group_by}=~{_regex_of(only)}"
        return names.DCGM_GPU_UTIL + _sel(self.gpu_selector, extra or "")


def grid(start: float, end: float, step_s: float) -> list[float]:
    """The query times of a range query over [start, end] every `step_s`."""
    count = math.floor((end - start) / step_s + 1e-9) + 1
    return [round(start + k * step_s, 3) for k in range(count)]


def split_range(
    start: float, end: float, step_s: float, max_points: int = MAX_POINTS
) -> list[tuple[float, float]]:
    """[start, end] as consecutive windows on one grid of `step_s`, each of at most
    `max_points` points (both ends included); no point is in two windows."""
    if step_s <= 0 or end < start:
        raise ValueError("need step_s > 0 and end >= start")
    points = math.floor((end - start) / step_s + 1e-9) + 1
    windows = []
    first = 0
    while first < points:
        last = min(points, first + max_points) - 1
        windows.append((start + first * step_s, start + last * step_s))
        first = last + 1
    return windows


@dataclass(frozen=True, slots=True)
class Reading:
    """One engine at one scrape: a snapshot, or None and why (its target was down)."""

    t: float  # the scrape's Unix time
    snapshot: MetricsSnapshot | None
    error: str | None = None
    gpu_util: Mapping[str, float] | None = None  # None: no GPU series for this engine
    client_pending: int = 0  # what its clients wait on (the pending query's, joined)


@dataclass
class _Point:
    samples: list[tuple[str, Mapping[str, str], float]] = field(default_factory=list)
    up: float | None = None


def _points(
    result: Sequence[Mapping[str, Any]],
) -> Iterable[tuple[Mapping[str, str], float, float]]:
    """(labels, time, value) of every point of a vector or matrix result."""
    for series in result:
        labels = series.get("metric", {})
        values = [series["value"]] if "value" in series else series.get("values", [])
        for ts, value in values:
            yield labels, round(float(ts), 3), float(value)


def readings(
    series: Sequence[Mapping[str, Any]],
    times: Sequence[Mapping[str, Any]],
    gpus: Sequence[Mapping[str, Any]] | None,
    group_by: str,
    dialect: Dialect | None = None,
) -> dict[str, dict[float, Reading]]:
    """Per engine (group value), per query time: its reading, from the three answers.

    Query times without a scrape time are skipped; the reading's `t` is the scrape's own time,
    or for a target whose `up` is 0 the query time (a down engine's last samples may still be
    in the answer: a backfilled history has no staleness markers).
    An engine with no GPU series has `gpu_util` None; `gpus` None: GPUs not asked for.
    `dialect` None: each engine's series read in the dialect they belong to.
    """
    by_engine: dict[str, dict[float, _Point]] = {}
    for labels, at, value in _points(series):
        key = labels.get(group_by)
        if key is None:
            continue
        point = by_engine.setdefault(key, {}).setdefault(at, _Point())
        name = labels.get("__name__", "")
        if name == "up":
            point.up = max(point.up or 0.0, value)
        else:
            point.samples.append((name, labels, value))
    scraped = {(lab.get(group_by), at): value for lab, at, value in _points(times)}
    util: dict[tuple[str, float], dict[str, float]] = {}
    for labels, at, value in _points(gpus or []):
        key = labels.get(group_by)
        if key is not None:
            util.setdefault((key, at), {})[labels.get("gpu", "0")] = value
    out: dict[str, dict[float, Reading]] = {}
    for key, points in by_engine.items():
        for at, point in sorted(points.items()):
            if point.up == 0:  # its last scrape failed (its old samples may still show)
                out.setdefault(key, {})[at] = Reading(at, None, "target down (up 0)")
                continue
            t = scraped.get((key, at))
            if t is None:
                continue
            gpu = None if gpus is None else util.get((key, at))
            if point.samples:
                snapshot = snapshot_from_samples(point.samples, dialect)
                reading = Reading(t, snapshot, None, gpu)
                if not snapshot.has_engine_series:
                    reading = Reading(t, None, "no engine metrics in its series", gpu)
            else:
                reading = Reading(t, None, "no series")
            out.setdefault(key, {})[at] = reading
    return out


def client_pending(result: Sequence[Mapping[str, Any]], group_by: str) -> dict[str, int]:
    """Per engine: the requests its clients wait on, from the pending query's answer joined on
    the group label (see the module's text); several series of one engine add up."""
    out: dict[str, int] = {}
    for series_labels, _, value in _points(result):
        key = series_labels.get(group_by)
        if key is None or not math.isfinite(value):
            continue
        out[key] = out.get(key, 0) + max(0, round(value))
    return out


def engine_labels(series: Sequence[Mapping[str, Any]], group_by: str) -> dict[str, dict[str, str]]:
    """Per engine: the labels all its engine series share (job, instance, pod, model, ...)."""
    common: dict[str, dict[str, str]] = {}
    for item in series:
        labels = dict(item.get("metric", {}))
        key = labels.get(group_by)
        if key is None or labels.get("__name__") == "up":
            continue
        labels.pop("__name__", None)
        if key not in common:
            common[key] = labels
        else:
            shared = common[key]
            common[key] = {k: v for k, v in shared.items() if labels.get(k) == v}
    return common


#: Series one engine has in the series query (its vLLM families, by label; a rough mean).
SERIES_PER_ENGINE = 25


def plan_batches(engines: int, points: int, budget: int = 2_000_000) -> tuple[int, int]:
    """(engines per query, points per window) so that one answer holds about `budget`
    values at most: windows of up to `MAX_POINTS`, as many engines as then fit (one at the
    least, its window shortened until it fits)."""
    window = max(1, min(points, MAX_POINTS))
    per_engine = SERIES_PER_ENGINE * window
    batch = max(1, min(engines, budget // per_engine))
    if batch == 1 and per_engine > budget:
        window = max(1, budget // SERIES_PER_ENGINE)
    return batch, window


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, what: str = "--step") -> float:
    """`15s`, `1m`, `0.5` (seconds) -> seconds; raises `MonitorError`."""
    match = _DURATION.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise MonitorError(f"{what} {text!r} is not a duration", hint="e.g. 15s, 1m, 2h or 0.5")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def parse_time(text: str, now: float, what: str = "--from") -> float:
    """RFC 3339 (`2026-01-31T12:00:00Z`), Unix seconds, `now` or `now-6h` -> Unix seconds."""
    import datetime as dt

    value = text.strip()
    if value == "now":
        return now
    if value.startswith("now-"):
        return now - parse_duration(value[4:], what)
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise MonitorError(
            f"{what} {text!r} is not a time",
            hint="RFC 3339 (2026-01-31T12:00:00Z), Unix seconds, now or now-6h",
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()
