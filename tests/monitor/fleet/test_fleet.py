"""The fleet monitor's pure pieces: queries and ranges, Prometheus answers turned into
per-engine readings (literal JSON), the per-engine detector bank (fake clock: engines
appearing, vanishing, a failed query, a repeated scrape), the backtest tally, the fleet view
at 500 engines and fleet.jsonl's lines."""

from __future__ import annotations

import io
import itertools
from typing import Any

import pytest
from rich.console import Console

from stallkit.contract import names
from stallkit.contract.fleet import FLEET_FILE, fleet_adapter
from stallkit.monitor.backtest.replay import BacktestTally, backtest_file, fill_gaps, replay_engine
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import StallEnded, StallStarted
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.fleet.bank import (
    EngineAppeared,
    EngineEvent,
    EngineVanished,
    FleetBank,
    FleetEvent,
    QueryFailed,
)
from stallkit.monitor.fleet.sinks import FleetOutcome, FleetWriter
from stallkit.monitor.fleet.view import FleetDashboard
from stallkit.monitor.fleet.watch import CycleDone, FleetStart
from stallkit.monitor.on_stall.command import stall_env
from stallkit.monitor.prometheus.alert_replay import AlertReplay
from stallkit.monitor.prometheus.queries import (
    MAX_POINTS,
    FleetQuery,
    Reading,
    engine_labels,
    label_name,
    matchers,
    parse_duration,
    parse_time,
    plan_batches,
    readings,
    split_range,
)
from stallkit.monitor.signals.parse import snapshot_from_samples

CONFIG = MonitorConfig(interval_s=1, stall_after_s=3, stop_after_s=None, gpu_window_s=0)


def test_a_range_splits_into_windows_of_at_most_max_points_covering_each_point_once() -> None:
    assert split_range(0, 100, 1, max_points=30) == [(0, 29), (30, 59), (60, 89), (90, 100)]
    day = split_range(1_700_000_000, 1_700_086_400, 1)
    points = [round((b - a) / 1) + 1 for a, b in day]
    assert max(points) == MAX_POINTS and sum(points) == 86_401
    assert all(b2 - a2 >= 0 and a2 == b1 + 1 for (_a1, b1), (a2, b2) in itertools.pairwise(day))
    assert split_range(5, 5, 15) == [(5, 5)]


def test_batches_keep_an_answer_within_its_budget() -> None:
    assert plan_batches(1000, 5760, budget=2_000_000) == (13, 5760)
    assert plan_batches(3, 100_000, budget=2_000_000) == (3, MAX_POINTS)
    assert plan_batches(10, 11_000, budget=25_000) == (1, 1000)


def test_queries_select_the_engines_and_escape_group_values() -> None:
    q = FleetQuery(selector='job="vllm"', group_by="pod", gpu_selector='job="dcgm"')
    assert 'job="vllm"' in q.series() and names.NUM_REQUESTS_RUNNING in q.series()
    assert q.times().startswith("max by (pod) (timestamp(")
    only = q.series(["a.b:1", 'x"y'])
    assert r'pod=~"a\\.b:1|x\"y"' in only
    assert q.gpus() == 'DCGM_FI_DEV_GPU_UTIL{job="dcgm"}'
    assert matchers('{job="vllm", pod=~"p-.*"}') == 'job="vllm", pod=~"p-.*"'
    with pytest.raises(MonitorError, match="label matchers"):
        matchers("job=vllm")
    with pytest.raises(MonitorError, match="not a label name"):
        label_name("a-b")


def test_times_and_steps_parse() -> None:
    assert (
        parse_duration("15s") == 15 and parse_duration("2m") == 120 and parse_duration("0.5") == 0.5
    )
    assert parse_time("2026-01-31T12:00:00Z", 0) == 1769860800
    assert parse_time("now-1h", 10_000) == 6400 and parse_time("1700000000", 0) == 1.7e9
    with pytest.raises(MonitorError, match="not a time"):
        parse_time("yesterday", 0)


def _series(name: str, labels: dict[str, str], points: list[tuple[float, float]]) -> dict[str, Any]:
    return {"metric": {"__name__": name, **labels}, "values": [[t, str(v)] for t, v in points]}


def _engine_series(
    instance: str, at: float, gen: float, running: int, engine: str = "0"
) -> list[dict[str, Any]]:
    labels = {"instance": instance, "job": "vllm", "engine": engine}
    return [
        _series(names.GENERATION_TOKENS, labels, [(at, gen)]),
        _series(names.NUM_REQUESTS_RUNNING, labels, [(at, running)]),
        _series(names.NUM_REQUESTS_WAITING, labels, [(at, 0)]),
    ]


def test_answers_become_one_reading_per_engine_and_scrape() -> None:
    series = [
        *_engine_series("a:1", 100, 50, 2, engine="0"),
        *_engine_series("a:1", 100, 70, 1, engine="1"),  # data-parallel: one engine, two views
        *_engine_series("b:1", 100, 10, 1),
        _series("up", {"instance": "b:1", "job": "vllm"}, [(100, 1)]),
        _series("up", {"instance": "c:1", "job": "vllm"}, [(100, 0)]),  # down
        _series("up", {"instance": "node:9100", "job": "node"}, [(100, 1)]),  # not an engine
    ]
    times = [
        _series("", {"instance": k}, [(100, 99.5)]) for k in ("a:1", "b:1", "c:1", "node:9100")
    ]
    gpus = [_series(names.DCGM_GPU_UTIL, {"instance": "a:1", "gpu": g}, [(100, 3)]) for g in "01"]
    got = readings(series, times, gpus, "instance")
    a = got["a:1"][100]
    assert a.t == 99.5 and a.snapshot is not None and a.gpu_util == {"0": 3.0, "1": 3.0}
    assert a.snapshot.gen_tokens == 120 and set(a.snapshot.engines) == {"0", "1"}
    assert got["b:1"][100].gpu_util is None  # no GPU series for it
    assert got["c:1"][100] == Reading(100, None, "target down (up 0)")
    assert got["node:9100"][100].snapshot is None
    assert engine_labels(series, "instance")["a:1"] == {"instance": "a:1", "job": "vllm"}


def _reading(t: float, gen: float, running: int = 2, gpu: float | None = 0.0) -> Reading:
    snap = snapshot_from_samples(
        [
            (names.GENERATION_TOKENS, {}, gen),
            (names.NUM_REQUESTS_RUNNING, {}, running),
            (names.NUM_REQUESTS_WAITING, {}, 1),
            (names.KV_CACHE_USAGE, {}, 0.97),
        ]
    )
    return Reading(t, snap, None, None if gpu is None else {"0": gpu})


def _stalls(events: list[FleetEvent]) -> list[tuple[str, str, float]]:
    return [
        (e.engine, e.event.kind, e.event.onset)
        for e in events
        if isinstance(e, EngineEvent) and isinstance(e.event, StallStarted)
    ]


def test_the_bank_runs_one_detector_per_engine_and_skips_a_scrape_it_has_read() -> None:
    bank = FleetBank(CONFIG, forget_after_s=10)
    events: list[FleetEvent] = []
    for t in range(8):
        frozen = _reading(t, 100.0)  # tokens stop: a stall from t=0 (3 s later: judged)
        healthy = _reading(t, 100.0 + 10 * t)
        events += bank.observe(t + 0.5, {"frozen": frozen, "healthy": healthy})
        events += bank.observe(t + 0.7, {"frozen": frozen, "healthy": healthy})  # same scrape
    appeared = [e.engine for e in events if isinstance(e, EngineAppeared)]
    assert appeared == ["frozen", "healthy"]
    assert _stalls(events) == [("frozen", "frozen", 0.0)]
    samples = [
        e for e in events if isinstance(e, EngineEvent) and type(e.event).__name__ == "Sample"
    ]
    assert len(samples) == 16  # each scrape read once


def test_engines_vanish_after_forget_after_and_a_failed_query_is_down_for_all() -> None:
    bank = FleetBank(CONFIG, forget_after_s=5)
    bank.observe(0, {"a": _reading(0, 1), "b": _reading(0, 1), "x": Reading(0, None, "no series")})
    assert set(bank.engines) == {"a", "b"}  # x was never seen with vLLM series
    failed = bank.failed(1, "HTTP 503")
    assert isinstance(failed[0], QueryFailed)
    downs = [
        e.engine for e in failed if isinstance(e, EngineEvent) and type(e.event).__name__ == "Down"
    ]
    assert downs == ["a", "b"]
    events: list[FleetEvent] = []
    for t in range(2, 9):
        events += bank.observe(t, {"a": _reading(t, t)})
    assert [e.engine for e in events if isinstance(e, EngineVanished)] == ["b"]
    assert set(bank.engines) == {"a"}
    again = bank.observe(9, {"a": _reading(9, 9), "b": _reading(9, 9)})
    assert any(isinstance(e, EngineAppeared) and e.engine == "b" for e in again)


def test_backtest_tally_keeps_each_stall_with_what_the_engine_showed() -> None:
    bank = FleetBank(CONFIG)
    tally = BacktestTally()
    gen = {
        0: 0,
        1: 10,
        2: 20,
        3: 20,
        4: 20,
        5: 20,
        6: 20,
        7: 30,
        8: 40,
        9: 40,
        10: 40,
        11: 40,
        12: 40,
    }
    points = {float(t): _reading(t, g, gpu=1.0) for t, g in gen.items()}
    for event in replay_engine(bank, "e", points, {"job": "vllm"}):
        tally.handle(event)
    stalls = tally.stalls(end=12)
    assert [(s.kind, s.onset, s.end, s.duration_s) for s in stalls] == [
        ("frozen", 2.0, 7.0, 5.0),
        ("frozen", 8.0, None, 4.0),  # still stalled at the end: counted to it
    ]
    assert (stalls[0].running, stalls[0].waiting, stalls[0].kv_usage) == (2, 1, 0.97)
    assert stalls[0].gpu_util_max == 1.0
    (engine,) = tally.engines(end=12)
    assert engine.exposure_s == 12 and engine.stalls == 2 and engine.stalls_per_engine_hour == 600
    report = backtest_file(tally, source="s", selector="", group_by="instance", start=0, end=12,
                           step_s=1, stall_after_s=3, wall_s=0.1)  # fmt: skip
    assert report.stalls_by_kind == {"frozen": 2} and report.engine_hours == pytest.approx(
        0.0033, abs=1e-4
    )


def test_gaps_on_the_grid_are_down_from_the_first_time_the_engine_was_seen() -> None:
    filled = fill_gaps({2.0: _reading(2, 1), 4.0: _reading(4, 2)}, [0.0, 1.0, 2.0, 3.0, 4.0], None)
    assert sorted(filled) == [2.0, 3.0, 4.0] and filled[3.0].snapshot is None


def _fleet_events(n: int, stalled: set[int]) -> list[FleetEvent]:
    bank = FleetBank(CONFIG)
    events: list[FleetEvent] = []
    for t in range(6):
        events += bank.observe(
            t, {f"engine-{i:03d}": _reading(t, 5.0 if i in stalled else 5.0 + t) for i in range(n)}
        )
    return events


def test_the_fleet_view_puts_stalled_engines_first_and_stays_short_at_500() -> None:
    view = FleetDashboard("http://prom:9090", max_rows=20)
    for event in _fleet_events(500, {7, 250, 499}):
        view.handle(event)
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(view.render())
    lines = out.getvalue().splitlines()
    assert len(lines) <= 20 + 4, len(lines)
    assert "500 engines: 3 stalled, 497 ok  (3 frozen)" in lines[1]
    first = [line.split()[0] for line in lines[3:6]]
    assert first == ["engine-007", "engine-250", "engine-499"]
    assert "STALLED frozen" in lines[3]
    assert "... 480 more: 480 ok" in lines[-1]


def test_fleet_jsonl_lines_and_the_on_stall_labels(tmp_path: Any) -> None:
    writer = FleetWriter(tmp_path / FLEET_FILE, "http://prom", 'job="vllm"', "instance", 1.0)
    outcome = FleetOutcome()
    events: list[FleetEvent | FleetStart] = [FleetStart(0, 1.7e9), *_fleet_events(2, {1})]
    for event in events:
        writer.handle(event)
        outcome.handle(event)
    writer.close()
    lines = [
        fleet_adapter.validate_json(x) for x in (tmp_path / FLEET_FILE).read_text().splitlines()
    ]
    assert [x.type for x in lines[:3]] == ["fleet_started", "appeared", "appeared"]
    stalled = [x for x in lines if x.type == "engine" and x.line.type == "stall_started"]
    assert [x.engine for x in stalled] == ["engine-001"]
    assert outcome.stalled_engines() == {"engine-001": {"frozen"}}
    started = next(
        e.event for e in events if isinstance(e, EngineEvent) and isinstance(e.event, StallStarted)
    )
    env = stall_env(started, "engine-001", tmp_path, "fleet", 1.7e9, {"job": "vllm", "pod": "p1"})
    assert env["STALLKIT_ENGINE_LABELS"] == '{"job": "vllm", "pod": "p1"}'
    assert not isinstance(started, StallEnded)


def test_alert_replay_applies_for_as_prometheus_does() -> None:
    replay = AlertReplay(
        "EngineStalled", for_s=2, rule_labels={"severity": "critical"}, group_by="instance"
    )

    def matrix(points: list[float]) -> list[dict[str, Any]]:
        return [{"metric": {"instance": "a:1"}, "values": [[t, "1"] for t in points]}]

    replay.feed(matrix([1, 2, 3, 4]), [0, 1, 2, 3, 4])  # active from 1, firing at 3
    replay.feed(matrix([6, 7]), [5, 6, 7, 8, 9])  # resolved at 5; again at 6, never 2 s long
    first, second = replay.finish()
    assert (first.active, first.fired, first.resolved) == (1, 3, 5)
    assert (second.active, second.fired, second.resolved) == (6, None, 8)
    assert first.engine == "a:1" and first.labels == {"instance": "a:1", "severity": "critical"}


def test_each_fleet_engine_has_its_own_exporter_series(tmp_path: Any) -> None:
    from stallkit.kits.arm.alerting import Alerting
    from stallkit.monitor.fleet.sinks import PerEngine
    from stallkit.monitor.on_stall.exporter import StallExporter

    exporter = StallExporter()
    alerting = Alerting(exporter=exporter)
    per_engine = PerEngine(lambda e, labels: alerting.for_fleet_engine(e, labels, tmp_path, 0.0))
    for event in _fleet_events(3, {2}):
        per_engine.handle(event)
    per_engine.close()
    active = {
        e: exporter.registry.get_sample_value(
            names.STALL_ACTIVE, {"engine": e, "arm": "fleet", "kind": "frozen"}
        )
        for e in ("engine-000", "engine-001", "engine-002")
    }
    assert active == {"engine-000": 0.0, "engine-001": 0.0, "engine-002": 1.0}


def test_plain_lines_name_each_stalled_engine_and_sum_up_the_fleet() -> None:
    from stallkit.monitor.fleet.sinks import FleetLines

    out = io.StringIO()
    lines = FleetLines(Console(file=out, width=200, color_system=None))
    bank = FleetBank(CONFIG)
    for t in range(6):
        for event in bank.observe(
            t, {f"engine-{i:03d}": _reading(t, 5.0 + t * (i != 2)) for i in range(3)}
        ):
            lines.handle(event)
        lines.handle(CycleDone(t))
    text = out.getvalue()
    assert "[     0.0s] fleet: 3 engines: 3 ok" in text
    assert "engine-002: STALL started: frozen, onset t=0.0s" in text
    assert "appeared" not in text and "engine-000: STALL" not in text
