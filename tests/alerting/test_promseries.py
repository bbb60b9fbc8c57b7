"""The timeline -> promtool input_series converter, on hand-written timeline lines."""

from __future__ import annotations

from stallkit.monitor.prometheus.series import input_series


def _sample(t: float, gen: float, running: int = 1, **extra: object) -> dict[str, object]:
    return {"type": "sample", "t": t, "gen_tokens": gen, "running": running, "waiting": 0, **extra}


def test_samples_land_on_the_grid_with_gaps_and_stale_points_when_down() -> None:
    lines = [
        _sample(0.0, 10, compute_s={"prefill": 1.5}, waiting_capacity=2, waiting_deferred=None),
        {"type": "gpu", "t": 0.01, "util": {"1": 40.0}},
        _sample(1.04, 20),  # jitter: nearest grid point is 1
        {"type": "down", "t": 3.0, "error": "HTTP 503"},
        {"type": "stall_started", "t": 3.5, "onset": 0.0, "kind": "frozen"},
        _sample(3.9, 25, running=0),
    ]
    series, points = input_series(lines, 1.0, job="j", instance="i:1", model_name="m")
    assert points == 5
    rows = {s["series"]: s["values"] for s in series}
    base = 'engine="0",instance="i:1",job="j",model_name="m"'
    assert rows['up{instance="i:1",job="j"}'] == "1 1 _ 0 1"
    assert rows[f"vllm:generation_tokens_total{{{base}}}"] == "10 20 _ stale 25"
    assert rows[f"vllm:num_requests_running{{{base}}}"] == "1 1 _ stale 0"
    by_reason = f'vllm:num_requests_waiting_by_reason{{{base},reason="capacity"}}'
    # a series a later scrape no longer carries goes stale, as Prometheus marks it
    assert rows[by_reason] == "2 stale _ stale stale"
    assert not any("deferred" in name for name in rows)  # None is not exported, not zero
    compute = f'vllm:scheduler_compute_seconds_total{{class="prefill",{base}}}'
    assert rows[compute] == "1.5 stale _ stale stale"
    assert rows['DCGM_FI_DEV_GPU_UTIL{gpu="1",instance="i:1",job="dcgm"}'] == "40 _ _ _ _"


def test_a_later_record_at_the_same_point_wins_and_other_lines_are_ignored() -> None:
    lines = [_sample(0.0, 1), _sample(0.2, 7), {"type": "stop_requested", "t": 9.0}]
    series, points = input_series(lines, 1.0)
    assert points == 1
    gen = next(s for s in series if s["series"].startswith("vllm:generation_tokens_total"))
    assert gen["values"] == "7"
