"""ab.html: one self-contained page with the table, the per-seed table and inline figures."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from reports.write import write_reports


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
    assert "time to first token (engine s)" in html and "stall (spinning)" in html
    assert "stopped by monitor" in html
    assert not [link for link in page.links if link.startswith(("http:", "https:", "//"))]
    assert "<script" not in html
