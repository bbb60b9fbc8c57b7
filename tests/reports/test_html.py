"""ab.html: one self-contained page with the table, the per-seed table and inline figures."""

from __future__ import annotations

import itertools
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from stallkit.reports.ab_figures import load_ab
from stallkit.reports.ab_html import distributions_figure, log_bins, survival_figure
from stallkit.reports.timeline_plot import timeline_figure
from stallkit.reports.write import write_reports
from tests.reports.conftest import SeedArmWriter


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.links: list[str] = []
        self.text: list[str] = []
        self.open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.links += [v or "" for k, v in attrs if k in ("src", "href")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_report_is_self_contained_and_holds_the_figures(tmp_path: Path, seed_arm: Any) -> None:
    (tmp_path / "kit.json").write_text(json.dumps({"name": "k"}))
    for seed, onset in ((3, 400.0), (4, None)):
        seed_arm(tmp_path, "base", seed, onset)
        seed_arm(tmp_path, "fix", seed, None)
    write_reports(tmp_path)
    html = (tmp_path / "ab.html").read_text()
    page = _Page()
    page.feed(html)
    page.close()
    text = " ".join(page.text)
    assert "A/B: k, 2 seeds, virtual clock, 2026-12-01" in text  # kit, seeds, clock, date
    assert "1 of 2" in text and "0 of 2" in text  # stalled seeds per arm
    assert "p = 0.5" in text  # the verdict
    assert "ended early in 1 of 2 seeds (stopped by the monitor during a stall in 1" in text
    assert "Time to first stall (Kaplan-Meier)" in text
    assert page.tags.count("table") == 2 and page.tags.count("svg") == 3
    assert "time to first token (engine s, log scale)" in html and "stall (spinning)" in html
    assert "inter-token latency (engine ms, log scale)" in html
    assert "svg { max-width: 100%" in html  # a wide figure scales to the page
    assert "stopped by monitor" in html
    assert not [link for link in page.links if link.startswith(("http:", "https:", "//"))]
    assert "<script" not in html


def test_itl_axis_spans_the_data_on_a_log_scale(tmp_path: Path, seed_arm: SeedArmWriter) -> None:
    """Tokens 100-200 ms apart and one stall's 240 s gap: both on the axis, neither squashed."""
    arm = seed_arm(tmp_path, "base", 1, None)
    stalled = json.loads((arm / "turns.jsonl").read_text().splitlines()[0])
    stalled["chunks"] = [[1.0, 1], [241.0, 1]]  # one token 240 s after the one before
    with (arm / "turns.jsonl").open("a") as turns:
        turns.write(json.dumps(stalled) + "\n")
    fig = distributions_figure(tmp_path)
    try:
        ax_itl = fig.axes[1]
        low, high = ax_itl.get_xlim()
        assert ax_itl.get_xscale() == "log" and ax_itl.get_yscale() == "log"
        assert "ms" in ax_itl.get_xlabel() and "log scale" in ax_itl.get_xlabel()
        assert low == pytest.approx(100.0)  # the shortest gap (2 s over 20 tokens), in ms
        assert high == pytest.approx(240_000, rel=0.01)  # the stall's gap
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_log_bins() -> None:
    edges = log_bins([0.0, -1.0, 100.0, 200.0, 240_000.0], count=10)
    assert len(edges) == 11 and edges[0] == 100.0 and edges[-1] >= 240_000.0
    ratios = {round(b / a, 6) for a, b in itertools.pairwise(edges)}
    assert len(ratios) == 1  # equal steps on a log axis
    assert log_bins([5.0])[0] < 5.0 < log_bins([5.0])[-1]
    assert log_bins([0.0]) == []


def test_legends_cover_no_data(tmp_path: Path, seed_arm: SeedArmWriter) -> None:
    """Every legend of the page's figures sits outside its axes (inside, they covered the
    start of a run and the base arm's stall band)."""
    import matplotlib.pyplot as plt

    (tmp_path / "kit.json").write_text(json.dumps({"name": "k"}))
    for seed, onset in ((3, 400.0), (4, None)):
        seed_arm(tmp_path, "base", seed, onset)
        seed_arm(tmp_path, "fix", seed, None)
    report = load_ab(tmp_path)
    figures = [
        timeline_figure(tmp_path),
        distributions_figure(tmp_path),
        survival_figure(report),
    ]
    try:
        legends = 0
        for fig in figures:
            fig.canvas.draw()
            for ax in fig.axes:
                legend = ax.get_legend()
                if legend is not None:
                    legends += 1
                    assert not legend.get_window_extent().overlaps(ax.get_window_extent())
        assert legends >= 6  # requests and GPUs per timeline arm, TTFT, ITL, survival
    finally:
        for fig in figures:
            plt.close(fig)
