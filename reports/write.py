"""Write a run directory's reports: the A/B (or one-arm) tables, the timeline plot, the HTML.

Kept apart from `stallkit.reports.ab_figures` (the figures and the markdown) because the HTML report reads
those figures: one module on top of both, so that neither imports the other back.
"""

from __future__ import annotations

from pathlib import Path

from stallkit.contract.jsonl import write_json
from stallkit.reports.ab_figures import ABReport, load_ab, shown_dirs, to_ab_file
from stallkit.reports.ab_html import to_html
from stallkit.reports.ab_markdown import to_markdown
from stallkit.reports.rundir import reading_once
from stallkit.reports.timeline_plot import save_timelines

__all__ = ["write_reports"]


def write_reports(
    ab_dir: Path, partial: bool = False, damaged_ok: bool | None = None, drawn: bool = True
) -> ABReport:
    """(Re)make the reports (ab.md, ab.json, ab.html; run.* for one arm) and timeline.png.

    DamagedRunError when a seed's files cannot be read, unless `damaged_ok` (default:
    `partial`); a run cut short gets its verdict only with `partial` (see `load_ab`).
    `drawn=False`: the tables only (ab.md, ab.json), without the plots that take most of the
    time (timeline.png, ab.html), as after a Ctrl-C. Each seed's files are parsed once for all
    of them (`reading_once`)."""
    with reading_once():
        return _write(ab_dir, partial, damaged_ok, drawn)


def _write(ab_dir: Path, partial: bool, damaged_ok: bool | None, drawn: bool) -> ABReport:
    report = load_ab(ab_dir, partial, damaged_ok)
    stem = report.stem
    (ab_dir / f"{stem}.md").write_text(to_markdown(report), encoding="utf-8")
    write_json(ab_dir / f"{stem}.json", to_ab_file(report))
    if not drawn:
        return report
    shown = shown_dirs(report)
    timeline_svgs = save_timelines(ab_dir, ab_dir / "timeline.png", report.title, shown)
    (ab_dir / f"{stem}.html").write_text(to_html(report, ab_dir, timeline_svgs), encoding="utf-8")
    return report
