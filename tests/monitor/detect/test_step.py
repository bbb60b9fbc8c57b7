"""The monitor's pure step: one tick's readings in, the typed events out, on integer times."""

from __future__ import annotations

from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import (
    Down,
    GpuReading,
    Sample,
    StallStarted,
    StopRequested,
    Up,
    Verdict,
)
from stallkit.monitor.detect.step import MonitorStep
from tests.monitor.detect.test_detector import snap

CFG = MonitorConfig(stall_after_s=10, stop_after_s=20)


def test_a_tick_gives_gpu_sample_then_verdict_with_rates_from_the_second() -> None:
    step = MonitorStep(CFG, gpu_checked=True)
    first = step.events(0, snap(0), {"0": 50.0})
    assert [type(e) for e in first] == [GpuReading, Sample, Verdict]
    assert isinstance(first[1], Sample) and first[1].deltas is None
    second = step.events(2, snap(200), {"0": 50.0})
    assert isinstance(second[1], Sample) and second[1].gen_tok_s == 100.0


def test_without_gpus_no_reading_and_a_failed_scrape_is_down_then_up() -> None:
    step = MonitorStep(CFG, gpu_checked=False)
    assert [type(e) for e in step.events(0, snap(0), None)] == [Sample, Verdict]
    down = step.events(1, None, None, error="connection refused")
    assert down[0] == Down(1, "connection refused")
    assert step.events(2, None, None)[0] == Down(2, "unknown error")
    up = step.events(4, snap(10), None)
    assert up[0] == Up(4, 3) and isinstance(up[1], Sample) and up[1].deltas is None


def test_a_stuck_engine_stalls_then_asks_to_stop_on_the_ticks_given() -> None:
    step = MonitorStep(CFG, gpu_checked=True)
    events = [e for t in range(40) for e in step.events(t, snap(0), {"0": 0.0})]
    started = [e for e in events if isinstance(e, StallStarted)]
    stops = [e for e in events if isinstance(e, StopRequested)]
    assert len(started) == 1 and started[0].kind == "frozen" and started[0].onset == 0
    assert stops and stops[0].t == 20
