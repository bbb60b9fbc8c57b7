"""Write a run directory's reports: the A/B (or one-arm) tables, the timeline plot, the HTML.

Kept apart from `reports.ab` (the figures and the markdown) because the HTML report reads
those figures: one module on top of both, so that neither imports the other back.
"""

from __future__ import annotations

from pathlib import Path

from contract.jsonl import write_json
from reports.ab import ABReport, load_ab, to_ab_file, to_markdown
from reports.html import to_html
from reports.plot import save_timelines

__all__ = ["write_reports"]


def write_reports(ab_dir: Path) -> ABReport:
    """(Re)make the reports (ab.md, ab.json, ab.html; run.* for one arm) and timeline.png."""
    report = load_ab(ab_dir)
    stem = report.stem
    (ab_dir / f"{stem}.md").write_text(to_markdown(report), encoding="utf-8")
    write_json(ab_dir / f"{stem}.json", to_ab_file(report))
    timeline_svg = save_timelines(ab_dir, ab_dir / "timeline.png", report.title)
    (ab_dir / f"{stem}.html").write_text(to_html(report, ab_dir, timeline_svg), encoding="utf-8")
    return report
