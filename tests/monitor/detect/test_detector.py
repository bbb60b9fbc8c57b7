"""The pure stall detector, fed samples with fake integer times."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from stallkit.monitor.config import MonitorConfig, monitor_config
from stallkit.monitor.detect.detector import StallDetector
from stallkit.monitor.detect.events import (
    DetectorEvent,
    StallEnded,
    StallOngoing,
    StallStarted,
    StopRequested,
)
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.signals.parse import EngineMetrics, MetricsSnapshot

CFG = MonitorConfig(stall_after_s=10, stop_after_s=30)


def snap(
    gen: float, running: int = 4, waiting: int = 6, queries: float = 0, steps: float = 0
) -> MetricsSnapshot:
    engine = EngineMetrics(
        running=running,
        waiting=waiting,
        gen_tokens=gen,
        prefix_queries=queries,
        iterations=steps,
    )
    return MetricsSnapshot(
        running=running,
        waiting=waiting,
        gen_tokens=gen,
        prefix_queries=queries,
        iterations=steps,
        engines={"0": engine},
    )


def feed(
    det: StallDetector,
    samples: Sequence[tuple[int, MetricsSnapshot | None]],
    gpu: Mapping[str, float] | None = None,
) -> list[DetectorEvent]:
    out: list[DetectorEvent] = []
    for t, s in samples:
        out += det.observe(t, s, gpu)
    return out


def busy_then_stuck(stop_at: int, until: int, **kw: float) -> list[tuple[int, MetricsSnapshot]]:
    """Tokens flow until `stop_at`, then the counter stays put until `until`."""
    out = []
    for t in range(until + 1):
        gen = min(t, stop_at) * 100
        q = t * 50 if kw.get("spin") else 0
        out.append((t, snap(gen, queries=q)))
    return out


def test_onset_exactly_at_stall_after() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    # The counter last moves at t=5 (the onset); the rule first holds at t=6.
    events = feed(det, busy_then_stuck(5, 14))
    assert events == []
    suspect = det.state
    assert suspect.status == "suspect" and suspect.seconds == 9
    events = det.observe(15, snap(500))
    assert len(events) == 1
    started = events[0]
    assert isinstance(started, StallStarted)
    assert (started.t, started.onset, started.kind, started.gpu_checked) == (15, 5, "frozen", False)
    assert started.onset_snapshot.gen_tokens == 500
    assert det.state.status == "stalled" and det.state.kind == "frozen"
    ongoing = det.observe(16, snap(500))
    assert ongoing == [StallOngoing(16, 5, "frozen", False, 11)]


def test_a_lagging_simulators_clock_is_not_a_quiet_period() -> None:
    # A simulator starved of CPU covers 0.1 engine s (over its scale) per wall second: 40
    # wall seconds without a token are 4 on its own clock, not the 10 of stall_after.
    quiet = [(t, snap(500)) for t in range(41)]
    sim = StallDetector(CFG, gpu_checked=False)
    assert [e for t, s in quiet for e in sim.observe(t, s, engine_t=t / 10)] == []
    assert sim.state.status == "suspect" and sim.state.seconds == 40  # held 40 wall s
    # A real engine's page (no clock of its own) with the same gap and no tokens is a stall.
    real = StallDetector(CFG, gpu_checked=False)
    events = [e for e in feed(real, quiet) if not isinstance(e, StallOngoing)]
    assert [(type(e), e.t, e.onset) for e in events] == [
        (StallStarted, 10, 0),
        (StopRequested, 30, 0),
    ]


def test_the_rule_counts_the_engines_clock_and_events_keep_wall_times() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    # Tokens until t=5, then none; the simulator runs at half its scale throughout.
    samples = busy_then_stuck(5, 70)
    events = [e for t, s in samples for e in det.observe(t, s, engine_t=t / 2)]
    rare = [e for e in events if not isinstance(e, StallOngoing)]
    # 10 and 30 seconds on its clock take 20 and 60 on the wall, which events are timed by
    assert rare == [
        StallStarted(25, 5, "frozen", False, samples[6][1]),
        StopRequested(65, 5, 60),
    ]
    assert det.state.status == "stalled" and det.state.seconds == 65


def test_a_simulators_clock_catching_up_at_a_freeze_is_not_a_quiet_period() -> None:
    # A simulator starved of CPU steps at a third of its scale (its clock falls behind the
    # wall) with tokens until t=30, when its core freezes: with nothing left to step it catches
    # up with the wall at once, its clock leaping 20 s. The leap is its lag, not quiet: the
    # stall starts stall_after (10) after the onset, on the wall as on its clock.
    det = StallDetector(CFG, gpu_checked=False)
    events: list[DetectorEvent] = []
    for t in range(61):
        engine_t = t / 3 if t <= 30 else float(t)  # 10 at the freeze, then the wall's
        events += det.observe(t, snap(100 * min(t, 30)), engine_t=engine_t)
    rare = [e for e in events if not isinstance(e, StallOngoing)]
    assert [(type(e), e.t, e.onset) for e in rare] == [
        (StallStarted, 40, 30),
        (StopRequested, 60, 30),
    ]


def test_work_arriving_on_an_idle_engine_starts_the_clock_at_its_sample() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    samples = [(t, snap(500, running=0, waiting=0)) for t in range(5)]
    samples += [(t, snap(500, running=0, waiting=3)) for t in range(5, 15)]
    assert feed(det, samples) == []
    started = det.observe(15, snap(500, running=0, waiting=3))
    assert [(type(e), e.onset) for e in started] == [(StallStarted, 5)]


def test_a_shorter_gap_does_not_fire() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    samples = [(t, snap(100 * t)) for t in range(5)]
    samples += [(t, snap(400)) for t in range(5, 14)]  # 9 s without tokens
    samples += [(t, snap(400 + 100 * (t - 13))) for t in range(14, 40)]
    assert feed(det, samples) == []
    assert det.state.status == "ok"


def test_idle_is_not_a_stall() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    assert feed(det, [(t, snap(500, running=0, waiting=0)) for t in range(100)]) == []
    assert det.state.status == "idle"


def test_down_is_not_a_stall_and_ends_one() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    assert feed(det, [(t, None) for t in range(100)]) == []
    assert det.state.status == "down" and det.state.seconds == 99
    events = feed(det, busy_then_stuck(0, 20))
    assert any(isinstance(e, StallStarted) for e in events)
    ended = det.observe(25, None)
    assert ended == [StallEnded(25, 0, "frozen", 25)]
    assert det.state.status == "down"


def test_spinning_versus_frozen() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    started = [e for e in feed(det, busy_then_stuck(5, 20, spin=1)) if isinstance(e, StallStarted)]
    assert [e.kind for e in started] == ["spinning"]
    steps_only = StallDetector(CFG, gpu_checked=False)
    samples = [(t, snap(min(t, 3) * 10, steps=t * 7)) for t in range(20)]
    kinds = [e.kind for e in feed(steps_only, samples) if isinstance(e, StallStarted)]
    assert kinds == ["spinning"]


def test_frozen_ignores_the_last_steps_before_the_freeze() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    # Steps move with the tokens and once more into the onset interval, then nothing.
    samples = [(t, snap(min(t, 5) * 10, steps=min(t, 6) * 3)) for t in range(20)]
    kinds = [e.kind for e in feed(det, samples) if isinstance(e, StallStarted)]
    assert kinds == ["frozen"]


def test_stop_requested_once_after_stop_after() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    events = feed(det, busy_then_stuck(5, 60))
    stops = [e for e in events if isinstance(e, StopRequested)]
    assert stops == [StopRequested(35, 5, 30)]
    never = StallDetector(MonitorConfig(stall_after_s=10, stop_after_s=None), gpu_checked=False)
    assert not any(isinstance(e, StopRequested) for e in feed(never, busy_then_stuck(5, 60)))


def test_busy_gpus_name_the_kind_and_do_not_clear_the_stall() -> None:
    busy = StallDetector(CFG, gpu_checked=True)
    started = [
        e
        for e in feed(busy, busy_then_stuck(5, 60), gpu={"0": 3.0, "1": 60.0})
        if isinstance(e, StallStarted)
    ]
    assert [(e.t, e.onset, e.kind) for e in started] == [(15, 5, "busy_hang")]
    idle = StallDetector(CFG, gpu_checked=True)
    events = feed(idle, busy_then_stuck(5, 60), gpu={"0": 3.0, "1": 5.0})
    started = [e for e in events if isinstance(e, StallStarted)]
    assert [(e.t, e.kind, e.gpu_checked) for e in started] == [(15, "frozen", True)]
    # A configured source with no reading is no evidence either way: nothing moves, frozen.
    blind = StallDetector(CFG, gpu_checked=True)
    started = [e for e in feed(blind, busy_then_stuck(5, 60)) if isinstance(e, StallStarted)]
    assert [e.kind for e in started] == ["frozen"]


def test_recovery_ends_the_stall_with_its_duration() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    feed(det, busy_then_stuck(5, 40))
    events = det.observe(41, snap(600))
    assert events == [StallEnded(41, 5, "frozen", 36)]
    assert det.state.status == "ok"
    # A second stall is a new one, with its own stop request.
    events = feed(det, [(t, snap(600)) for t in range(42, 90)])
    assert [type(e) for e in events if not isinstance(e, StallOngoing)] == [
        StallStarted,
        StopRequested,
    ]


def test_going_idle_ends_a_stall() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    feed(det, busy_then_stuck(5, 20))
    assert det.observe(21, snap(500, running=0, waiting=0)) == [StallEnded(21, 5, "frozen", 16)]


@pytest.mark.parametrize(
    "fields",
    [
        {"stall_after_s": 0},
        {"stall_after_s": -1},
        {"interval_s": 0},
        {"stall_after_s": 60, "stop_after_s": 30},
        {"idle_gpu_perc": 101},
        {"unknown": 1},
    ],
)
def test_thresholds_are_validated(fields: dict[str, Any]) -> None:
    with pytest.raises(MonitorError, match="invalid monitor setting"):
        monitor_config(**fields)


def test_defaults() -> None:
    cfg = monitor_config()
    assert (cfg.interval_s, cfg.stall_after_s, cfg.stop_after_s, cfg.idle_gpu_perc) == (
        1,
        60,
        240,
        5,
    )


def test_gpu_readings_lagging_the_onset_are_not_evidence() -> None:
    cfg = MonitorConfig(stall_after_s=10, stop_after_s=30, gpu_window_s=12)
    det = StallDetector(cfg, gpu_checked=True)
    events: list[DetectorEvent] = []
    for t, s in busy_then_stuck(5, 20):
        # Readings average a 12 s window: up to t=17 they may still show the work before the
        # onset, so when the stall starts at t=15 the busy readings are no evidence of a hang.
        events += det.observe(t, s, {"0": 80.0})
    started = [e for e in events if isinstance(e, StallStarted)]
    assert [(e.t, e.onset, e.kind) for e in started] == [(15, 5, "frozen")]


def test_gpu_busy_mid_quiet_neither_restarts_the_clock_nor_ends_a_stall() -> None:
    det = StallDetector(CFG, gpu_checked=True)
    events: list[DetectorEvent] = []
    for t, s in busy_then_stuck(5, 40):
        util = {"0": 90.0} if t == 20 else {"0": 0.0}
        events += det.observe(t, s, util)
    kinds = [(type(e).__name__, e.t, e.onset) for e in events if not isinstance(e, StallOngoing)]
    assert kinds == [("StallStarted", 15, 5), ("StopRequested", 35, 5)]


def test_a_page_unanswered_while_clients_wait_is_a_stall_not_down() -> None:
    """A server that answers neither its clients nor its page (a SIGSTOPped llama.cpp server:
    its HTTP threads stop too) is stalled; with nobody waiting the same silence is down."""
    det = StallDetector(CFG, gpu_checked=False)
    events: list[DetectorEvent] = []
    events += det.observe(0, snap(100, running=2, waiting=0))
    events += det.observe(1, snap(120, running=2, waiting=0))
    for t in range(2, 16):
        events += det.observe(t, None, client_pending=2)
    started = [e for e in events if isinstance(e, StallStarted)]
    assert len(started) == 1 and started[0].kind == "frozen" and started[0].onset == 1
    evidence = started[0].evidence
    assert evidence is not None and evidence.page_unanswered and evidence.client_waiting == 2
    assert evidence.words() == "metrics page unanswered, 2 requests waiting on clients"
    assert det.state.status == "stalled"
    # the page answers again with tokens counted since: the stall ends
    ended = det.observe(16, snap(160, running=2, waiting=0), client_pending=2)
    assert [type(e) for e in ended] == [StallEnded]

    quiet = StallDetector(CFG, gpu_checked=False)
    quiet.observe(0, snap(100, running=2, waiting=0))
    quiet.observe(1, snap(120, running=2, waiting=0))
    nothing = [e for t in range(2, 16) for e in quiet.observe(t, None, client_pending=0)]
    assert nothing == [] and quiet.state.status == "down"


def test_a_page_unanswered_on_accepted_connections_is_frozen_after_work() -> None:
    """Without clients: a connection accepted and no page (a process frozen whole) after a
    page with work is quiet with that work pending; after an idle page it is down, and a
    refused connection (a dead engine) is down whatever the last page showed."""
    det = StallDetector(CFG, gpu_checked=False)
    det.observe(0, snap(100, running=4, waiting=8))
    det.observe(1, snap(120, running=4, waiting=8))
    events = [e for t in range(2, 16) for e in det.observe(t, None, page_unanswered=True)]
    started = [e for e in events if isinstance(e, StallStarted)]
    assert len(started) == 1 and started[0].kind == "frozen" and started[0].onset == 1
    evidence = started[0].evidence
    assert evidence is not None and evidence.connections_accepted and evidence.page_unanswered
    assert evidence.words() == "connections accepted, page unanswered"
    assert [type(e) for e in det.observe(16, snap(160, running=4, waiting=8))] == [StallEnded]

    idle = StallDetector(CFG, gpu_checked=False)
    idle.observe(0, snap(100, running=0, waiting=0))
    idle.observe(1, snap(100, running=0, waiting=0))
    assert [e for t in range(2, 16) for e in idle.observe(t, None, page_unanswered=True)] == []
    assert idle.state.status == "down"

    dead = StallDetector(CFG, gpu_checked=False)
    dead.observe(0, snap(100, running=4, waiting=8))
    dead.observe(1, snap(120, running=4, waiting=8))
    assert [e for t in range(2, 16) for e in dead.observe(t, None)] == []
    assert dead.state.status == "down"
