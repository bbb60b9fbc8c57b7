"""ab.html: one self-contained page with the table, the per-seed table and inline figures."""

from __future__ import annotations

import itertools
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from stallkit.reports.ab_figures import load_ab
from stallkit.reports.ab_html import survival_figure
from stallkit.reports.latency_plot import latency_figures, log_bins
from stallkit.reports.timeline_plot import arm_timeline_figures, timeline_figure
from stallkit.reports.write import write_reports
from tests.reports.conftest import SeedArmWriter

_VOID = {"meta", "br", "img", "input", "link", "hr"}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.links: list[str] = []
        self.text: list[str] = []
        self.meta: dict[str, str] = {}
        self.open: list[tuple[str, str]] = []  # the open elements: tag, class
        self.table_parents: list[str] = []  # the class of each table's enclosing element
        self.svg_parents: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        attr = {k: v or "" for k, v in attrs}
        self.links += [v for k, v in attr.items() if k in ("src", "href")]
        if tag == "meta" and "name" in attr:
            self.meta[attr["name"]] = attr.get("content", "")
        parent = self.open[-1][1] if self.open else ""
        if tag == "table":
            self.table_parents.append(parent)
        if tag == "svg":
            self.svg_parents.append(parent)
        if tag not in _VOID and (not self.open or self.open[-1][0] != "svg"):
            self.open.append((tag, attr.get("class", "")))

    def handle_endtag(self, tag: str) -> None:
        if self.open and self.open[-1][0] == tag:
            self.open.pop()

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
    # survival, a timeline per arm, TTFT and ITL: each in a container that scales it
    assert page.tags.count("svg") == 5 and page.svg_parents == ["fig"] * 5
    assert "time to first token (engine s, log scale)" in html and "stall (spinning)" in html
    assert "inter-token latency (engine ms, log scale)" in html
    assert ".fig svg { display: block; max-width: 100%" in html  # figures scale to the page
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
    _, fig = latency_figures(tmp_path)
    try:
        ax_itl = fig.axes[0]
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
        *arm_timeline_figures(tmp_path),
        *latency_figures(tmp_path),
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
        # requests and GPUs per timeline arm (in timeline.png and the HTML), TTFT, ITL, survival
        assert legends >= 11
    finally:
        for fig in figures:
            plt.close(fig)


def _page(tmp_path: Path, seed_arm: SeedArmWriter) -> _Page:
    (tmp_path / "kit.json").write_text(json.dumps({"name": "k"}))
    for seed, onset in ((3, 400.0), (4, None)):
        seed_arm(tmp_path, "base", seed, onset)
        seed_arm(tmp_path, "fix", seed, None)
    write_reports(tmp_path)
    page = _Page()
    page.feed((tmp_path / "ab.html").read_text())
    page.close()
    return page


def test_page_fits_a_phone(tmp_path: Path, seed_arm: SeedArmWriter) -> None:
    """On a 390 px phone the page is laid out at the phone's width (not a 980 px desktop
    zoomed out), and the tables, wider than that, scroll sideways inside their containers."""
    page = _page(tmp_path, seed_arm)
    assert page.meta["viewport"] == "width=device-width, initial-scale=1"
    assert page.table_parents == ["wide", "wide"]  # the A/B table and the per-seed table
    html = (tmp_path / "ab.html").read_text()
    assert ".wide { overflow-x: auto;" in html
    # a p-value is not broken at its exponent's hyphen
    assert '<span class="nw">p = 0.5</span>' in html


def test_latency_distributions_are_shares_of_each_arm(
    tmp_path: Path, seed_arm: SeedArmWriter
) -> None:
    """Arms of different sizes compare: each arm's TTFT and ITL histograms are shares of its
    own turns and tokens, summing to 1 per arm, whatever its size."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import StepPatch

    for seed in (1, 2, 3):  # fix has three seeds' turns, base one
        seed_arm(tmp_path, "fix", seed, None)
    seed_arm(tmp_path, "base", 1, None)
    figures = latency_figures(tmp_path)
    try:
        for fig in figures:
            (ax,) = fig.axes
            steps = [p for p in ax.patches if isinstance(p, StepPatch)]
            assert len(steps) == 2  # one per arm
            for step in steps:
                values, _, _ = step.get_data()
                assert float(values.sum()) == pytest.approx(1.0)
            assert ax.get_ylabel().startswith("share of")
        # fix has 9 turns, base 3: the labels still say how many each share is of
        labels = figures[0].axes[0].get_legend_handles_labels()[1]
        assert labels == ["base (3 turns)", "fix (9 turns)"]
    finally:
        for fig in figures:
            plt.close(fig)
