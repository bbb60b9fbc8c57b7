"""Each stall kind from its signature in the samples, fed to the pure detector with fake
integer times: one scenario per kind, and the progress that is not a stall."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from stallkit.contract.timeline import STALL_KINDS, StallKind
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.detector import SIGNATURES, Evidence, StallDetector, classify
from stallkit.monitor.detect.events import DetectorEvent, StallEnded, StallStarted
from stallkit.monitor.signals.parse import EngineMetrics, MetricsSnapshot

CFG = MonitorConfig(stall_after_s=10, stop_after_s=None, gpu_window_s=1)
ONSET = 5


def page(**values: float | None) -> MetricsSnapshot:
    fields: dict[str, float | None] = {
        "running": 2,
        "waiting": 3,
        "gen_tokens": 0,
        "prompt_tokens": 0,
        "preemptions": 0,
        "prefix_queries": 0,
        "iterations": 0,
    } | values
    engine = EngineMetrics(**fields)  # type: ignore[arg-type]
    return MetricsSnapshot(**fields, engines={"0": engine})  # type: ignore[arg-type]


#: (t) -> (page, GPU %, engine CPU s) after the onset; before it tokens flow
Scenario = Callable[[int], tuple[MetricsSnapshot | None, float, float]]


def _quiet(t: int, **values: float | None) -> MetricsSnapshot:
    return page(gen_tokens=ONSET * 10, **values)


SCENARIOS: dict[StallKind, Scenario] = {
    # the scheduler steps (prefix-cache queries climb) and schedules nothing; GPUs idle
    "spinning": lambda t: (_quiet(t, prefix_queries=t * 100, iterations=t), 0.0, 1.0 * t),
    # nothing moves at all (SIGSTOP)
    "frozen": lambda t: (_quiet(t), 0.0, 0.0),
    # nothing running, a request waits for good; the engine loop ticks over it
    "blocked": lambda t: (_quiet(t, running=0, waiting=1, iterations=t), 0.0, 1.0 * t),
    # requests thrown back and re-prefilled: prompt tokens and preemptions climb
    "thrashing": lambda t: (_quiet(t, prompt_tokens=t * 900, preemptions=t, iterations=t), 80, t),
    # GPUs at 100 %, no step, no token (a collective hang)
    "busy_hang": lambda t: (_quiet(t), 100.0, 0.02 * t),
    # /metrics answers, but without the engine's series
    "dead_core": lambda t: (MetricsSnapshot(), 0.0, 0.0),
}


def run(scenario: Scenario, until: int = 30) -> list[DetectorEvent]:
    det = StallDetector(CFG, gpu_checked=True)
    events: list[DetectorEvent] = []
    for t in range(until + 1):
        snap: MetricsSnapshot | None
        if t <= ONSET:
            snap, gpu, cpu = page(gen_tokens=t * 10), 90.0, 1.0 * t
        else:
            snap, gpu, cpu = scenario(t)
        events += det.observe(t, snap, {"0": gpu, "1": gpu}, engine_cpu_s=cpu)
    return events


@pytest.mark.parametrize("kind", list(SCENARIOS))
def test_each_kind_is_named_from_its_signature_at_onset_plus_stall_after(kind: StallKind) -> None:
    started = [e for e in run(SCENARIOS[kind]) if isinstance(e, StallStarted)]
    assert [(e.kind, e.onset, e.t) for e in started] == [(kind, ONSET, ONSET + 10)]


def test_every_kind_has_one_signature_and_a_scenario() -> None:
    assert [k for k, _ in SIGNATURES] != [] and sorted(k for k, _ in SIGNATURES) == sorted(
        STALL_KINDS
    )
    assert set(SCENARIOS) == set(STALL_KINDS)


def test_signatures_are_checked_in_order() -> None:
    # a core gone trumps everything; preemptions name thrashing even with nothing running
    assert classify(Evidence(core_gone=True, preempted=True)) == "dead_core"
    assert classify(Evidence(preempted=True, blocked=True)) == "thrashing"
    assert classify(Evidence(blocked=True, stepped=True, gpu_busy=True)) == "blocked"
    # busy GPUs with a stepping scheduler: it spins on busy GPUs, not a hang
    assert classify(Evidence(gpu_busy=True, stepped=True)) == "spinning"
    assert classify(Evidence(gpu_busy=True)) == "busy_hang"
    assert classify(Evidence()) == "frozen"
    # blocked gauges without a step are a stopped core's last gauges: not blocked
    assert classify(Evidence(blocked=True)) == "frozen"
    assert classify(Evidence(blocked=True, gpu_busy=True)) == "busy_hang"


def test_a_long_prefill_on_busy_gpus_is_progress_not_a_stall() -> None:
    # no token for 25 s, but prompt tokens are counted as chunks finish and nothing is
    # preempted: prefill moving forward
    def prefill(t: int) -> tuple[MetricsSnapshot, float, float]:
        return _quiet(t, prompt_tokens=(t // 3) * 2048, iterations=t), 100.0, 1.0 * t

    events = run(prefill)
    assert [e for e in events if isinstance(e, StallStarted)] == []


def test_a_page_that_never_had_the_engines_series_is_not_a_dead_core() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    for t in range(40):
        assert det.observe(t, MetricsSnapshot()) == []
    assert det.state.status == "idle"


def test_a_dead_core_ends_when_the_series_come_back_and_down_ends_it_too() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    events: list[DetectorEvent] = []
    for t in range(30):
        events += det.observe(t, page(gen_tokens=t * 10) if t <= ONSET else MetricsSnapshot())
    state = det.state
    assert (state.status, state.kind) == ("stalled", "dead_core")
    ended = det.observe(30, None)
    assert [(e.kind, e.onset) for e in ended if isinstance(e, StallEnded)] == [("dead_core", 5)]
    assert det.state.status == "down"


def test_a_long_re_prefill_between_preemptions_is_thrashing() -> None:
    # prompt tokens counted for three intervals, then the request is thrown back: the prefill
    # never ends in a token, however many scrapes each round spans
    def rounds(t: int) -> tuple[MetricsSnapshot, float, float]:
        n = t - ONSET
        return _quiet(t, prompt_tokens=n * 2048, preemptions=n // 4, iterations=t), 90.0, 1.0 * t

    started = [e for e in run(rounds) if isinstance(e, StallStarted)]
    # the first round counted as progress until it was thrown away (its last sample, t=8);
    # from then on every round follows a preemption within stall_after: no progress
    assert [(e.kind, e.onset) for e in started] == [("thrashing", ONSET + 3)]


def test_a_dead_core_after_a_restart_or_while_idle_is_still_named() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    events: list[DetectorEvent] = []
    for t in range(8):  # work, then the server goes down (restarting)
        events += det.observe(t, page(gen_tokens=t * 10) if t < 4 else None)
    for t in range(8, 30):  # back up, but without the engine's series: its core never came back
        events += det.observe(t, MetricsSnapshot())
    started = [e for e in events if isinstance(e, StallStarted)]
    assert [(e.kind, e.onset, e.t) for e in started] == [("dead_core", 8, 18)]
    idle = StallDetector(CFG, gpu_checked=False)
    events = [*idle.observe(0, page(gen_tokens=0)), *idle.observe(1, page(running=0, waiting=0))]
    for t in range(2, 20):  # idle when its core died: the requests sent since are gone with it
        events += idle.observe(t, MetricsSnapshot())
    assert [e.kind for e in events if isinstance(e, StallStarted)] == ["dead_core"]


def test_one_blank_page_does_not_name_a_frozen_engine_a_dead_core() -> None:
    det = StallDetector(CFG, gpu_checked=False)
    events: list[DetectorEvent] = []
    for t in range(30):
        snap = page(gen_tokens=min(t, ONSET) * 10)
        events += det.observe(t, MetricsSnapshot() if t == ONSET + 2 else snap)
    assert [e.kind for e in events if isinstance(e, StallStarted)] == ["frozen"]


def _stopped_with_stale_gauges(moving: str | None, cpu_known: bool) -> list[DetectorEvent]:
    """A core that streams (one running, two waiting) until ONSET, then keeps the gauges of its
    last step (nothing running, two waiting), as a SIGSTOPped core's API server shows them;
    `moving` names what still moves after ONSET: "counters" (prefix-cache queries), "cpu" (the
    engine's CPU, counters still), or None (nothing: the core is stopped)."""
    det = StallDetector(CFG, gpu_checked=False)
    events: list[DetectorEvent] = []
    for t in range(31):
        quiet = t > ONSET
        tokens = min(t, ONSET) * 10
        queries = t * 100 if moving == "counters" or not quiet else ONSET * 100
        snap = page(
            running=0 if quiet else 1,
            waiting=2,
            gen_tokens=tokens,
            prefix_queries=queries,
            iterations=min(t, ONSET),
        )
        cpu = 1.0 * t if moving == "cpu" or not quiet else 1.0 * ONSET + 0.01 * t
        events += det.observe(t, snap, None, engine_cpu_s=cpu if cpu_known else None)
    return events


@pytest.mark.parametrize(
    ("moving", "cpu_known", "kind"),
    [
        (None, False, "frozen"),  # the SIGSTOP as `kit monitor URL` sees it: gauges alone
        (None, True, "frozen"),  # its CPU known: a few percent (the scrapes), no step
        ("counters", False, "blocked"),  # a live core stepping over a request it cannot admit
        ("cpu", True, "blocked"),  # no counter moves but the core burns a whole CPU
    ],
    ids=["stopped", "stopped-cpu-known", "stepping-counters", "stepping-cpu"],
)
def test_a_stopped_core_whose_last_gauges_read_blocked_is_frozen(
    moving: str | None, cpu_known: bool, kind: StallKind
) -> None:
    events = _stopped_with_stale_gauges(moving, cpu_known)
    started = [e for e in events if isinstance(e, StallStarted)]
    assert [(e.kind, e.onset, e.t) for e in started] == [(kind, ONSET, ONSET + 10)]
    assert (started[0].onset_snapshot.running, started[0].onset_snapshot.waiting) == (0, 2)
