"""Backtests of a recorded history: the simulator's timelines (one per stall kind but the dead
core, healthy, down)
turned into OpenMetrics, loaded with `promtool tsdb create-blocks-from openmetrics` into a
Prometheus data directory and served by a real Prometheus; `kit backtest` against it finds
the stalls the runs recorded, of the same kinds, at the same onsets within one step, and
none on the healthy and down engines. The same file (and a timeline.jsonl) replayed offline
with `--from-file` gives the same stalls; `kit rules --backtest` over the same history says
when each generated alert would have fired, one scrape plus stall_after after each onset."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stallkit.contract.fleet import (
    ALERTS_FILE,
    BACKTEST_FILE,
    BACKTEST_HTML,
    STALLS_FILE,
    AlertFiring,
    BacktestFile,
    BacktestStall,
)
from stallkit.contract.jsonl import read_json, read_jsonl
from stallkit.monitor.backtest.sources import backtest_prometheus
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.prometheus.client import PrometheusClient
from stallkit.monitor.prometheus.queries import SERIES_PER_ENGINE, FleetQuery
from stallkit.monitor.prometheus.series import openmetrics_text
from tests.alerting.alerting_support import INTERVAL_S, STALL_AFTER_S, Recorded, prometheus, tool

#: an hour ago: inside the default retention, and whole blocks before the head
T0 = round(time.time() - 3600, 1)
RULE = ["--stall-after", str(STALL_AFTER_S), "--gpu-window", "0", "--step", str(INTERVAL_S)]


@dataclass(frozen=True)
class History:
    openmetrics: Path
    prom: str
    expected: dict[str, list[tuple[str, float]]]  # instance -> [(kind, onset Unix)]


@pytest.fixture(scope="module")
def history(
    timelines: dict[str, Recorded], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[History]:
    tool("promtool")
    tmp = tmp_path_factory.mktemp("backfill")
    # every kind but the dead core: a backfilled block has no staleness markers, so a series
    # that left the page reads as one Prometheus stopped scraping (no new sample), not gone
    fleet = {f"{n}:8000": rec.lines for n, rec in timelines.items() if n != "dead_core"}
    path = tmp / "history.om.txt"
    path.write_text(openmetrics_text(fleet, T0))
    made = subprocess.run(
        [tool("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(path), str(tmp / "data")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    expected = {
        instance: [(x["kind"], T0 + x["onset"]) for x in lines if x["type"] == "stall_started"]
        for instance, lines in fleet.items()
    }
    with prometheus(tmp, [], data=tmp / "data") as prom:
        yield History(path, prom, expected)


def _kit(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "stallkit", "backtest", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def _found(out: Path) -> dict[str, list[BacktestStall]]:
    found: dict[str, list[BacktestStall]] = {}
    for stall in read_jsonl(out / STALLS_FILE, BacktestStall):
        found.setdefault(stall.engine, []).append(stall)
    return found


def _assert_same_stalls(history: History, out: Path, t0: float = 0.0) -> None:
    found = _found(out)
    want = {i: stalls for i, stalls in history.expected.items() if stalls}
    assert set(found) == set(want), (found, want)
    for instance, stalls in want.items():
        got = [(s.kind, s.onset + t0) for s in found[instance]]
        assert [k for k, _ in got] == [k for k, _ in stalls]
        for (_k, onset), (_kind, expected) in zip(got, stalls, strict=True):
            assert abs(onset - expected) <= INTERVAL_S + 1e-6, (instance, onset, expected)


@pytest.mark.slow
def test_backtest_of_a_backfilled_prometheus_finds_the_recorded_stalls(
    history: History, tmp_path: Path
) -> None:
    out = tmp_path / "bt"
    done = _kit(
        "--prometheus", history.prom, "--selector", '{job="vllm"}', "--from", str(T0),
        "--to", str(T0 + 6), *RULE, "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    _assert_same_stalls(history, out)
    report = read_json(out / BACKTEST_FILE, BacktestFile)
    assert {e.engine for e in report.engines} == set(history.expected)
    assert report.stalls == sum(len(s) for s in history.expected.values())
    kinds = [kind for stalls in history.expected.values() for kind, _onset in stalls]
    assert report.stalls_by_kind == {kind: kinds.count(kind) for kind in kinds}
    assert len(report.stalls_by_kind) == 5  # every kind the history holds
    assert report.stalls_per_engine_hour is not None and report.engine_hours > 0
    down = next(e for e in report.engines if e.engine == "down:8000")
    assert down.downs > 0 and down.stalls == 0
    assert "frozen:8000" in (out / BACKTEST_HTML).read_text()


def test_backtest_from_files_gives_the_same_stalls(
    history: History, timelines: dict[str, Recorded], tmp_path: Path
) -> None:
    done = _kit("--from-file", str(history.openmetrics), *RULE, "--out", str(tmp_path / "om"))
    assert done.returncode == 0, done.stdout + done.stderr
    _assert_same_stalls(history, tmp_path / "om")
    # a run's own timeline.jsonl, named by its directory, on the timeline's clock
    run = tmp_path / "frozen:8000"
    run.mkdir()
    (run / "timeline.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in timelines["frozen"].lines)
    )
    done = _kit("--from-file", str(run / "timeline.jsonl"), *RULE, "--out", str(tmp_path / "tl"))
    assert done.returncode == 0, done.stdout + done.stderr
    (stall,) = _found(tmp_path / "tl")["frozen:8000"]
    (expected,) = history.expected["frozen:8000"]
    assert stall.kind == expected[0] and abs(stall.onset + T0 - expected[1]) <= INTERVAL_S


@pytest.mark.slow
def test_rules_backtest_says_when_each_alert_would_have_fired_beside_the_stalls(
    history: History, tmp_path: Path
) -> None:
    out = tmp_path / "bt"
    rng = ["--prometheus", history.prom, "--from", str(T0), "--to", str(T0 + 6), "--out", str(out)]
    assert _kit(*rng, *RULE, "--selector", '{job="vllm"}').returncode == 0
    step = str(INTERVAL_S)
    argv = [sys.executable, "-m", "stallkit", "rules", "--backtest", *rng, "--stall-after", "1"]
    argv += ["--scrape-interval", step, "--eval-interval", step, "--gpu-match", "instance"]
    argv += ["--down-after", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = read_jsonl(out / ALERTS_FILE, AlertFiring)
    fired = {(a.alert, a.engine): a for a in alerts if a.fired is not None}
    stalled = {i: s for i, s in history.expected.items() if s}
    assert {e for a, e in fired if a == "EngineStalled"} == set(stalled)
    assert ("EngineMetricsDown", "down:8000") in fired
    for instance, [(_kind, onset)] in stalled.items():
        # the rule sees the quiet one scrape after the detector's onset, then waits its for:
        due = onset + INTERVAL_S + STALL_AFTER_S
        assert abs(fired[("EngineStalled", instance)].fired - due) <= INTERVAL_S + 1e-6, instance  # type: ignore[operator]
    page = (out / BACKTEST_HTML).read_text()
    assert "Alerts of the generated rules" in page and "EngineStalled" in page


async def test_small_windows_and_one_engine_per_query_find_the_same_stalls(
    history: History,
) -> None:
    # a budget of 20 points per answer: windows of 20 points, one engine a query, so every
    # stall spans a window's edge and each engine's state must carry across windows
    config = MonitorConfig(interval_s=INTERVAL_S, stall_after_s=STALL_AFTER_S, stop_after_s=None,
                           gpu_window_s=0)  # fmt: skip
    client = PrometheusClient(history.prom)
    try:
        tally = await backtest_prometheus(
            client, FleetQuery(selector='job="vllm"'), config, T0, T0 + 6, INTERVAL_S,
            budget=SERIES_PER_ENGINE * 20,
        )  # fmt: skip
    finally:
        await client.aclose()
    found: dict[tuple[str, str], float] = {
        (s.engine, s.kind): s.onset for s in tally.stalls(T0 + 6)
    }
    want = {(i, k): onset for i, stalls in history.expected.items() for k, onset in stalls}
    assert found.keys() == want.keys()
    assert all(abs(found[k] - want[k]) <= INTERVAL_S + 1e-6 for k in want)


@pytest.mark.slow
def test_rules_backtest_of_a_file_serves_it_from_a_prometheus_of_its_own(
    history: History, tmp_path: Path
) -> None:
    step = str(INTERVAL_S)
    argv = [sys.executable, "-m", "stallkit", "rules", "--backtest", "--from-file"]
    argv += [str(history.openmetrics), "--out", str(tmp_path), "--stall-after", "1"]
    argv += ["--scrape-interval", step, "--eval-interval", step, "--gpu-match", "instance"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = read_jsonl(tmp_path / ALERTS_FILE, AlertFiring)
    fired = {a.engine: a.fired for a in alerts if a.alert == "EngineStalled" and a.fired}
    assert set(fired) == {i for i, s in history.expected.items() if s}
    for instance, fired_at in fired.items():
        [(_kind, onset)] = history.expected[instance]
        assert abs(fired_at - (onset + INTERVAL_S + STALL_AFTER_S)) <= INTERVAL_S + 1e-6
