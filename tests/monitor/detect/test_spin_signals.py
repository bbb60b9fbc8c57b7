"""Telling a spinning engine from a frozen one without the usual counters.

Real vLLM's livelock moves none of the counters the monitor watched at first (prefix-cache
queries count only at admission, iteration tokens only on steps with output). Two signals
tell it from a freeze: the patched scheduler's step counter, and, for engines that export
no step counter, the engine's CPU time. Pure: integer times, no sleeps.
"""

from __future__ import annotations

from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.detector import StallDetector
from stallkit.monitor.detect.events import DetectorEvent, StallStarted
from stallkit.monitor.signals.parse import parse_metrics

CFG = MonitorConfig(stall_after_s=10, stop_after_s=30)


def page(gen: float, steps: float | None = None) -> str:
    lines = [
        'vllm:num_requests_running{engine="0",model_name="tiny"} 2.0',
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0',
        f'vllm:generation_tokens_total{{engine="0",model_name="tiny"}} {gen}',
        'vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 500.0',
        'vllm:iteration_tokens_total_count{engine="0",model_name="tiny"} 90.0',
    ]
    if steps is not None:
        for turn, empty, share in (("prefill", "true", 0.9), ("decode", "false", 0.1)):
            value = steps * share if empty == "true" else 40.0
            lines.append(
                f'vllm:scheduler_steps_total{{empty="{empty}",engine="0",'
                f'model_name="tiny",turn="{turn}"}} {value}'
            )
    return "\n".join(lines) + "\n"


def started(events: list[DetectorEvent]) -> list[StallStarted]:
    return [e for e in events if isinstance(e, StallStarted)]


def run(steps_per_s: float | None, cpu_per_s: float | None, until: int = 15) -> list[StallStarted]:
    """Tokens until t=2, then quiet with work pending; steps and CPU at the given rates."""
    det = StallDetector(CFG, gpu_checked=False)
    events: list[DetectorEvent] = []
    for t in range(until + 1):
        gen = min(t, 2) * 100.0
        steps = None if steps_per_s is None else 100.0 + t * steps_per_s
        cpu = None if cpu_per_s is None else 50.0 + t * cpu_per_s
        events += det.observe(t, parse_metrics(page(gen, steps)), None, engine_cpu_s=cpu)
    return started(events)


def test_step_counter_is_parsed_summed_over_turns() -> None:
    snapshot = parse_metrics(page(10.0, steps=1000.0))
    assert snapshot.steps == 900.0 + 40.0
    assert snapshot.engines["0"].steps == 940.0


def test_moving_step_counter_reads_spinning() -> None:
    (stall,) = run(steps_per_s=5000.0, cpu_per_s=None)
    assert stall.kind == "spinning" and stall.onset == 2


def test_still_counters_without_cpu_read_frozen() -> None:
    (stall,) = run(steps_per_s=None, cpu_per_s=None)
    assert stall.kind == "frozen"


def test_engine_burning_a_core_reads_spinning_without_a_step_counter() -> None:
    (stall,) = run(steps_per_s=None, cpu_per_s=1.0)
    assert stall.kind == "spinning"


def test_sigstopped_engine_stays_frozen_though_its_server_answers_scrapes() -> None:
    # the API server's few percent of a core while the engine core is stopped
    (stall,) = run(steps_per_s=None, cpu_per_s=0.04)
    assert stall.kind == "frozen"
    (stall,) = run(steps_per_s=0.0, cpu_per_s=0.04)
    assert stall.kind == "frozen"


def test_cpu_through_the_last_busy_interval_alone_is_not_spinning() -> None:
    # CPU burnt only in the first quiet interval (the last steps before a freeze) does not count
    det = StallDetector(CFG, gpu_checked=False)
    events: list[DetectorEvent] = []
    for t in range(16):
        cpu = 50.0 + min(t, 3) * 1.0
        gen = min(t, 2) * 100.0
        events += det.observe(t, parse_metrics(page(gen)), None, engine_cpu_s=cpu)
    (stall,) = started(events)
    assert stall.kind == "frozen"


def test_cpu_reading_lost_for_a_sample_does_not_count_as_movement() -> None:
    det = StallDetector(CFG, gpu_checked=False, spin_cpu_cores=0.5)
    events: list[DetectorEvent] = []
    for t in range(16):
        gen = min(t, 2) * 100.0
        cpu = None if t % 2 else 50.0 + t * 0.01
        events += det.observe(t, parse_metrics(page(gen)), None, engine_cpu_s=cpu)
    (stall,) = started(events)
    assert stall.kind == "frozen"
