"""The timelines' tok/s, requests and KV lines: means over equal bins of engine time, at most
`MAX_RATE_POINTS` of them, so a run sampled every second reads as a line, not a solid block."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.lines import Line2D

from stallkit.reports.timeline_plot import (
    MAX_RATE_POINTS,
    arm_timeline_figures,
    binned_levels,
    binned_rates,
    rate_bin_s,
    timeline_figure,
)
from tests.reports.conftest import SeedArmWriter


def _xy(line: Line2D) -> tuple[list[float], list[float]]:
    return (
        np.asarray(line.get_xdata(), dtype=float).tolist(),
        np.asarray(line.get_ydata(), dtype=float).tolist(),
    )


def test_rate_bins_are_round_and_few() -> None:
    assert rate_bin_s(5400.0) == 50.0  # 108 bins of a 90-minute run
    assert rate_bin_s(1000.0) == 5.0
    assert rate_bin_s(10.0) == pytest.approx(0.05)
    for x_max in (1.0, 7.0, 333.0, 5400.0, 86_400.0):
        assert x_max / rate_bin_s(x_max) <= MAX_RATE_POINTS


def test_binned_rates_weigh_each_rate_by_the_time_it_held() -> None:
    # each sample's rate is over the second before it: 10, 0, 10, 0 tok/s
    centres, rates = binned_rates([0.0, 1.0, 2.0, 3.0, 4.0], [0.0, 10.0, 0.0, 10.0, 0.0], 2.0)
    assert centres == [1.0, 3.0] and rates == [5.0, 5.0]
    # one interval across four bins holds its rate in each
    assert binned_rates([0.0, 4.0], [0.0, 6.0], 1.0)[1] == [6.0] * 4
    # before the first sample nothing was measured: a gap, not a zero
    _, rates = binned_rates([2.5, 3.0, 4.0], [0.0, 8.0, 2.0], 1.0)
    assert all(math.isnan(r) for r in rates[:2]) and rates[2:] == [8.0, 2.0]


def test_binned_rates_keep_the_tokens() -> None:
    """The binned line generates as many tokens as the samples did (uneven intervals)."""
    ts = [0.0, 0.3, 1.7, 2.0, 5.2, 6.0, 9.9]
    rates = [0.0, 100.0, 0.0, 350.0, 20.0, 0.0, 75.0]
    tokens = sum(r * (t1 - t0) for t0, t1, r in zip(ts, ts[1:], rates[1:], strict=False))
    _, binned = binned_rates(ts, rates, 2.0)
    assert sum(2.0 * r for r in binned[:-1]) + 1.9 * binned[-1] == pytest.approx(tokens)


def test_binned_levels_hold_each_level_until_the_next_sample() -> None:
    assert binned_levels([0.0, 1.0, 2.0], [4.0, 0.0, 9.0], 2.0) == ([1.0], [2.0])


def test_a_dense_timeline_is_drawn_in_bins(tmp_path: Path, seed_arm: SeedArmWriter) -> None:
    """A sample every half second for 1000 s, the rate swinging between idle and full speed:
    the tok/s, requests and KV lines have at most MAX_RATE_POINTS points and keep the mean."""
    import matplotlib.pyplot as plt

    arm = seed_arm(tmp_path, "fix", 1, None)
    samples = [
        {"type": "sample", "t": i / 2, "gen_tok_s": 350.0 * (i % 2), "running": i % 5}
        | {"kv_usage": 0.5}
        for i in range(2000)
    ]
    (arm / "timeline.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    figures = [timeline_figure(tmp_path, arm_dirs=[arm]), *arm_timeline_figures(tmp_path, [arm])]
    try:
        for fig in figures:
            ax_tok, ax_req, ax_kv = fig.axes[:3]
            (rate_line,) = ax_tok.get_lines()
            xs, rates = _xy(rate_line)
            assert 100 <= len(xs) <= MAX_RATE_POINTS
            # the mean rate in every full bin (the last holds only 4.5 s of samples)
            assert all(y == pytest.approx(175.0) for y in rates[:-1])
            assert "5 s bins" in ax_tok.get_ylabel()
            xs, running = _xy(ax_req.get_lines()[0])
            assert len(xs) <= MAX_RATE_POINTS
            assert max(running) <= 4.0  # a mean of 0..4, not a spike
            (kv_line,) = ax_kv.get_lines()
            assert len(_xy(kv_line)[0]) <= MAX_RATE_POINTS
    finally:
        for fig in figures:
            plt.close(fig)
