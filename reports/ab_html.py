"""ab.html: the A/B report as one self-contained page that opens offline in any browser.

The title (kit, seeds, clock, the run's date), the A/B table with its footnotes, each arm's
time to first stall as a Kaplan-Meier curve over its seeds' exposure (seeds that did not
stall marked where their observation ended), the per-seed table, each arm's timeline (the
panels of timeline.png, with stall bands named in its legend and the monitor's stop marked)
and the TTFT and inter-token latency distributions over all seeds, as each arm's share of
its own turns and tokens, on log axes spanning the data (a stall's gap of minutes beside
milliseconds of decoding). Legends sit outside the axes. The page reads on a phone: a
viewport, tables that scroll sideways inside their own containers, and narrow figures with
large text, side by side on a wide page and one under another on a narrow one, each scaled
to the width. Figures are inline SVG drawn by matplotlib: no script, no stylesheet or font
from the network. Reads saved run directories only."""

from __future__ import annotations

import re
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from stallkit.reports.ab_figures import ABReport, shown_dirs, title
from stallkit.reports.ab_markdown import footnotes, seed_cells, table_rows
from stallkit.reports.ab_slo import NONINFERIOR
from stallkit.reports.forensics_frames import bundle_items
from stallkit.reports.latency_plot import FIGSIZE, legend_below
from stallkit.reports.rundir import read_meta
from stallkit.reports.seed_stats import distinct, kaplan_meier
from stallkit.reports.timeline_plot import HTML_FONT_PT

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
@media (max-width: 40em) { body { margin: 0.75em; } h1 { font-size: 1.5em; } }
.wide { overflow-x: auto; margin: 1em 0; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
table.ab td { min-width: 12em; } table.ab td:first-child { min-width: 8em; }
table.ab tr > :first-child { position: sticky; left: 0; background: #fff; box-shadow: 1px 0 0 #ccc; }
td.stalled { color: #b00; } td.clean { color: #070; }
.nw { white-space: nowrap; }
p.note { color: #555; font-size: 0.9em; }
code.lib { color: #777; }
.figs { display: flex; flex-wrap: wrap; gap: 1em 2em; align-items: flex-start; }
.fig { max-width: 100%; overflow-x: auto; }
.fig svg { display: block; max-width: 100%; min-width: 22em; height: auto; }
"""
#: a number that must not break across lines (`p = 6.1e-06`, `8.99e-09`)
_NOWRAP = re.compile(r"p = \d[\d.]*(?:e[-+]\d+)?|\d[\d.]*e[-+]\d+")


def _text(cell: str) -> str:
    """A table cell's text as HTML, its p-values and exponents kept on one line."""
    return _NOWRAP.sub(lambda m: f'<span class="nw">{m.group(0)}</span>', escape(cell))


def _wide(table: str) -> str:
    """A table in a container that scrolls sideways on a narrow page (the page itself not)."""
    return f'<div class="wide">{table}</div>'


def _figures(svgs: list[str]) -> str:
    """Figures side by side where the page is wide enough, one under another where not;
    each scales down to the page's width and scrolls sideways below a legible size."""
    return '<div class="figs">' + "".join(f'<div class="fig">{s}</div>' for s in svgs) + "</div>"


def survival_figure(report: ABReport) -> Figure:
    """Per arm, the share of seeds without a stall over engine hours of exposure (Kaplan-Meier);
    `+` marks a seed that ran its length without a stall, `x` one that ended early."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with plt.rc_context({"font.size": HTML_FONT_PT}):
        fig, ax = plt.subplots(figsize=FIGSIZE, layout="constrained")
        _draw_survival(ax, report)
    return fig


def _draw_survival(ax: Axes, report: ABReport) -> None:
    for name, all_rows in report.seeds.items():
        rows = distinct(all_rows)  # a repeat of an earlier seed's run is not a new observation
        times, survival = kaplan_meier(rows)
        hours = [t / 3600 for t in times]
        runs = f"{len(rows)}" if len(rows) == len(all_rows) else f"{len(rows)} of {len(all_rows)}"
        (line,) = ax.step(hours, survival, where="post", lw=1.5, label=f"{name} ({runs})")
        for marker, early in (("+", False), ("x", True)):
            marks = [r for r in rows if not r.stalled and (r.censored is not None) is early]
            xs = [r.exposure_s / 3600 for r in marks]
            ys = [_at(times, survival, r.exposure_s) for r in marks]
            if xs:
                what = "ended early" if early else "no stall"
                ax.plot(xs, ys, marker, color=line.get_color(), ms=8, label=f"{name}: {what}")
    ax.set_xlabel("engine hours of exposure")
    ax.set_ylabel("runs without a stall")
    ax.set_ylim(-0.03, 1.05)
    legend_below(ax)


def _at(times: list[float], survival: list[float], t: float) -> float:
    """The step function's value at `t` (its last step at or before `t`)."""
    value = survival[0]
    for ti, si in zip(times, survival, strict=True):
        if ti <= t:
            value = si
    return value


def _table(report: ABReport) -> str:
    head = "".join(
        f"<th>{escape(n)}<br><code>{escape(a.spec)}</code></th>" for n, a in report.arms.items()
    )
    rows = [f"<tr><th></th>{head}</tr>"]
    for key, label, cells in table_rows(report):
        tds = []
        for cell in cells:
            css = ""
            if key == NONINFERIOR and cell:  # a regression is marked as a stall is
                css = ' class="stalled"' if cell.startswith("no ") else ""
            if key in ("stalls", "seeds"):
                css = (
                    ' class="clean"'
                    if cell in ("none",) or cell.startswith("0 of")
                    else ' class="stalled"'
                )
            tds.append(f"<td{css}>{_text(cell)}</td>")
        rows.append(f"<tr><td>{escape(label)}</td>{''.join(tds)}</tr>")
    return _wide('<table class="ab">' + "".join(rows) + "</table>")


def _seed_table(report: ABReport) -> str:
    cols = ["arm", "seed", "stalled", "kind", "onset (s)", "stopped", "turns", "preemptions"]
    cols += ["restores recomputed", "decode tok/s", "clock", "like for like", "same run as"]
    rows = ["<tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"]

    for name, seeds in report.seeds.items():
        for r in seeds:
            cells = [name, *seed_cells(r)]
            rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    return _wide("<table>" + "".join(rows) + "</table>")


def _forensics(report: ABReport) -> str:
    """The stall forensics section, as in the markdown report (empty without a stall)."""
    arms = {name: arm.forensics for name, arm in report.arms.items()}
    items = bundle_items(arms, prefix_arm=len(arms) > 1)
    if not items:
        return ""
    lines = []
    for item in items:
        quoted = [
            f'<code class="lib" title="library code">{escape(f)}</code>'
            if lib
            else f"<code>{escape(f)}</code>"
            for f, lib in zip(item.frames, item.library, strict=True)
        ]
        quoted += [escape(item.scheduler)] if item.scheduler else []
        shown = "; ".join(quoted) or "no stack dump"
        if item.profile:
            shown = f"{escape(item.profile)}: {shown}"
        link = f'<a href="{escape(item.path)}/">{escape(item.path)}</a>'
        lines.append(f"<li>{escape(item.stall)}: {link} — {shown}")
    return "<h2>Stall forensics</h2><ul>" + "</li>".join(lines) + "</li></ul>"


def _run_date(dirs: list[Path]) -> str:
    for d in dirs:
        started = read_meta(d).started_at
        if started is not None:
            return started[:10]
    return "unknown date"


def to_html(report: ABReport, run_dir: Path, timeline_svgs: list[str] | None = None) -> str:
    """The whole page (`timeline_svgs`: each arm's timeline figure already drawn, else drawn
    here)."""
    from stallkit.reports.latency_plot import latency_figures
    from stallkit.reports.timeline_plot import arm_timeline_figures, svg_text

    read = [d for dirs in report.dirs.values() for d in dirs]
    heading = f"{title(report)}, {_run_date(read)}"
    h1 = f'{escape(title(report))}, <span class="nw">{escape(_run_date(read))}</span>'
    if timeline_svgs is None:
        timeline_svgs = [svg_text(f) for f in arm_timeline_figures(run_dir, shown_dirs(report))]
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in footnotes(report))
    shown = " (each arm's first seed)" if report.seed_count > 1 else ""
    latency = latency_figures(run_dir, report.dirs or None)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(heading)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{h1}</h1>",
        _table(report),
        notes,
        "<h2>Time to first stall (Kaplan-Meier)</h2>",
        _figures([svg_text(survival_figure(report))]),
        "<h2>Per seed</h2>",
        _seed_table(report),
        f"<h2>Timelines{shown}</h2>",
        _figures(timeline_svgs),
        "<h2>Latency distributions (all seeds)</h2>",
        '<p class="note">Each arm\'s share of its own turns and tokens, so arms of different '
        "sizes compare.</p>",
        _figures([svg_text(f) for f in latency]),
        _forensics(report),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
