"""The /metrics parser and counter rates against recorded vLLM pages."""

from __future__ import annotations

from pathlib import Path

import pytest

from stallkit.contract.names import FORK_FAMILIES, MONITOR_FAMILIES
from stallkit.engine.serve.metrics import SimMetrics
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.core import SimEngine
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.signals.parse import SimClock, parse_metrics
from stallkit.monitor.signals.rates import counter_delta, snapshot_deltas

DATA = Path(__file__).parents[1] / "data"


def page(name: str) -> str:
    return (DATA / name).read_text()


def golden_families() -> set[str]:
    """Families of a real vLLM 0.32 server (a copy of the shared golden list)."""
    text = (DATA / "vllm-0.32-metric-families.txt").read_text()
    return {line.split()[0] for line in text.splitlines() if line.strip()}


def test_every_read_family_that_is_not_fork_only_is_in_the_golden_list() -> None:
    golden = golden_families()
    assert golden >= MONITOR_FAMILIES - FORK_FAMILIES
    assert not FORK_FAMILIES & golden


def test_recorded_page_declares_every_golden_family() -> None:
    text = page("vllm-0.32-one-engine.txt")
    declared = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert golden_families() <= declared


def test_one_engine_page() -> None:
    snap = parse_metrics(page("vllm-0.32-one-engine.txt"))
    assert snap.has_engine_series
    assert (snap.running, snap.waiting) == (12, 2)
    assert (snap.waiting_capacity, snap.waiting_deferred) == (2, 0)
    assert snap.kv_usage == pytest.approx(0.62)
    assert snap.gen_tokens == 812345.0
    assert snap.prompt_tokens == 23456789.0
    assert snap.preemptions == 37.0
    assert snap.prefix_queries is not None and snap.prefix_hits is not None
    assert snap.prefix_hits < snap.prefix_queries
    assert snap.request_success == {"stop": 1800.0, "length": 412.0, "abort": 9.0, "error": 0.0}
    assert snap.iterations is not None and snap.iterations > 95000
    # Upstream vLLM has no fork families: absent, not zero.
    assert snap.prefill_compute_share is None
    assert snap.compute_s is None
    assert list(snap.engines) == ["0"]


def test_the_simulators_clock_is_read_and_a_real_engine_has_none() -> None:
    config = SimConfig()
    text = SimMetrics(config, 60.0).render(SimEngine(config).stats, 12.5).decode()
    snap = parse_metrics(text)
    assert snap.has_engine_series and snap.sim_clock == SimClock(engine_s=12.5, scale=60.0)
    assert parse_metrics(page("vllm-0.32-one-engine.txt")).sim_clock is None
    assert parse_metrics(page("vllm-0.32-two-engines.txt")).sim_clock is None


def test_older_release_uses_gpu_cache_usage_and_lacks_newer_names() -> None:
    snap = parse_metrics(page("vllm-0.6-gpu-cache.txt"))
    assert snap.kv_usage == pytest.approx(0.8734)
    assert (snap.running, snap.waiting) == (7, 3)
    assert snap.waiting_capacity is None and snap.waiting_deferred is None
    assert snap.prefix_queries is None and snap.prefix_hits is None
    assert snap.iterations == 28702.0
    assert snap.request_success == {"stop": 611.0, "length": 88.0}


def test_two_engines_summed_with_per_engine_view() -> None:
    snap = parse_metrics(page("vllm-0.32-two-engines.txt"))
    e0, e1 = snap.engines["0"], snap.engines["1"]
    assert (e0.running, e1.running, snap.running) == (12, 4, 16)
    assert (snap.waiting_capacity, snap.waiting_deferred) == (5, 3)
    assert snap.waiting == 8
    assert e0.gen_tokens is not None and e1.gen_tokens is not None
    assert snap.gen_tokens == e0.gen_tokens + e1.gen_tokens
    # A fraction is not summed: the fullest engine's pool is the one that stalls.
    assert snap.kv_usage == pytest.approx(0.98)
    assert snap.prefill_compute_share == pytest.approx(0.5)
    assert snap.compute_s == pytest.approx({"prefill": 4650.37, "decode": 4425.75})
    assert e1.compute_s == pytest.approx({"prefill": 1550.12, "decode": 1475.25})


def test_family_names_without_type_lines_and_bare_counter_names() -> None:
    text = (
        'vllm:num_requests_running{engine="0"} 2\n'
        'vllm:num_requests_waiting{engine="0"} 0\n'
        'vllm:generation_tokens{engine="0"} 10\n'
    )
    snap = parse_metrics(text)
    assert (snap.running, snap.gen_tokens) == (2, 10.0)


def test_not_a_vllm_page_and_malformed_text() -> None:
    assert not parse_metrics("# HELP up x\nup 1\n").has_engine_series
    with pytest.raises(MonitorError):
        parse_metrics("vllm:num_requests_running{engine=0 1\n")


def test_counter_reset_gives_no_negative_or_spiking_rate() -> None:
    before = parse_metrics(page("counter-reset-before.txt"))
    after = parse_metrics(page("counter-reset-after.txt"))
    assert after.gen_tokens is not None and before.gen_tokens is not None
    assert after.gen_tokens < before.gen_tokens
    d = snapshot_deltas(before, after, 1.0)
    assert d.gen_tokens == after.gen_tokens  # counted from zero after the restart
    assert 0 <= d.gen_tok_s <= after.gen_tokens
    for value in (d.prompt_tokens, d.preemptions, d.prefix_queries, d.iterations):
        assert value is not None and value >= 0
    normal = snapshot_deltas(after, after, 1.0)
    assert normal.gen_tokens == 0 and normal.gen_tok_s == 0


def test_counter_delta_cases() -> None:
    assert counter_delta(10, 15) == 5
    assert counter_delta(10, 3) == 3
    assert counter_delta(None, 3) is None
    assert counter_delta(3, None) is None


def test_one_engine_restarting_does_not_hide_the_other() -> None:
    text = (
        'vllm:num_requests_running{{engine="{e}"}} 1\n'
        'vllm:generation_tokens_total{{engine="{e}"}} {v}\n'
    )
    prev = parse_metrics(text.format(e=0, v=1000) + text.format(e=1, v=500))
    cur = parse_metrics(text.format(e=0, v=1100) + text.format(e=1, v=20))
    # Summed totals went down (1500 -> 1120), yet 100 + 20 tokens were made.
    assert snapshot_deltas(prev, cur, 2.0).gen_tokens == 120
    assert snapshot_deltas(prev, cur, 2.0).gen_tok_s == 60
