"""ab.html: the A/B report as one self-contained page that opens offline in any browser.

The title (kit, seeds, clock, the run's date), the A/B table with its footnotes, each arm's
time to first stall as a Kaplan-Meier curve over its seeds' exposure (seeds that did not
stall marked where their observation ended), the per-seed table, each arm's timeline (the
same figure as timeline.png, with stall bands named in its legend and the monitor's stop
marked) and each arm's TTFT and inter-token latency distributions over all its seeds, on
log axes spanning the data (a stall's gap of minutes beside milliseconds of decoding).
Legends sit outside the axes; figures scale down to the page's width. Figures are inline
SVG drawn by matplotlib: no script, no stylesheet or font from the network. Reads saved run
directories only.
"""

from __future__ import annotations

import io
import math
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from stallkit.contract.files import META_FILE, TURNS_FILE
from stallkit.reports.ab_figures import ABReport, shown_dirs, title
from stallkit.reports.ab_markdown import footnotes, seed_cells, table_rows
from stallkit.reports.ab_slo import NONINFERIOR
from stallkit.reports.forensics_frames import bundle_items
from stallkit.reports.rundir import arm_dirs, effective_scale, read_meta, read_turns, seed_dirs
from stallkit.reports.seed_stats import distinct, kaplan_meier

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td.stalled { color: #b00; } td.clean { color: #070; }
p.note { color: #555; font-size: 0.9em; }
svg { max-width: 100%; height: auto; }
"""


def _svg(fig: Figure) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _arm_turn_dirs(run_dir: Path) -> dict[str, list[Path]]:
    """Per arm, the directories holding its turns (one per seed)."""
    out: dict[str, list[Path]] = {}
    dirs = arm_dirs(run_dir) or [p for p in sorted(run_dir.iterdir()) if p.is_dir()]
    for d in dirs:
        per_seed = [d] if (d / META_FILE).exists() else seed_dirs(d)
        if per_seed:
            name = read_meta(per_seed[0]).arm
            out[name] = per_seed
    return out


def _latencies(dirs: list[Path]) -> tuple[list[float], list[float], list[int]]:
    """TTFT of completed turns, and inter-token gaps with their token counts (engine s)."""
    ttft: list[float] = []
    gaps: list[float] = []
    weights: list[int] = []
    for d in dirs:
        if not (d / TURNS_FILE).exists():
            continue
        scale = effective_scale(read_meta(d))
        for r in read_turns(d / TURNS_FILE):
            if r.outcome != "ok":
                continue
            if r.ttft_s is not None:
                ttft.append(r.ttft_s * scale)
            for (t0, _), (t1, n) in zip(r.chunks, r.chunks[1:], strict=False):
                if n > 0:
                    gaps.append((t1 - t0) * scale / n)
                    weights.append(n)
    return ttft, gaps, weights


def distributions_figure(run_dir: Path, dirs: dict[str, list[Path]] | None = None) -> Figure:
    """Per arm, histograms of TTFT (engine s) and inter-token latency (engine ms, counted in
    tokens) over all seeds, on log-scaled axes that span the data: a stall's gaps of minutes
    sit beside the milliseconds of normal decoding. `dirs`: each arm's seed directories, else
    those found under `run_dir`."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_ttft, ax_itl) = plt.subplots(1, 2, figsize=(12, 4.2), layout="constrained")
    latencies = {name: _latencies(d) for name, d in (dirs or _arm_turn_dirs(run_dir)).items()}
    ttft_bins = log_bins([t for ttft, _, _ in latencies.values() for t in ttft])
    itl_bins = log_bins([1000 * g for _, gaps, _ in latencies.values() for g in gaps])
    # arrays, not lists: matplotlib takes a list's every float as a dataset of its own first
    for name, (ttft, gaps, weights) in latencies.items():
        if ttft:
            label = f"{name} ({len(ttft)} turns)"
            ax_ttft.hist(np.asarray(ttft), bins=ttft_bins, histtype="step", lw=1.5, label=label)
        if gaps:
            label = f"{name} ({sum(weights)} tokens)"
            itl_ms = np.asarray([1000 * g for g in gaps])
            ax_itl.hist(
                itl_ms,
                bins=itl_bins,
                weights=np.asarray(weights),
                histtype="step",
                lw=1.5,
                label=label,
            )
    _log_axis(ax_ttft, ttft_bins, "time to first token (engine s, log scale)", "turns")
    _log_axis(ax_itl, itl_bins, "inter-token latency (engine ms, log scale)", "tokens (log scale)")
    ax_itl.set_yscale("log")
    return fig


def log_bins(values: list[float], count: int = 50) -> list[float]:
    """`count` log-spaced bin edges from the smallest positive value to the largest (a value
    of 0 or less has no place on a log axis); [] without a positive value."""
    import numpy as np

    positive = [v for v in values if v > 0]
    if not positive:
        return []
    low, high = min(positive), max(positive)
    if high <= low * 1.01:  # one value: a bin around it
        low, high = low / 1.5, high * 1.5
    return [float(e) for e in np.geomspace(low, high * 1.0001, count + 1)]


def _log_axis(ax: Axes, bins: list[float], xlabel: str, ylabel: str) -> None:
    """A log-scaled x axis over the bins, plain-number ticks, the legend below the axes."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if bins:
        ax.set_xscale("log")
        ax.set_xlim(bins[0], bins[-1])
        few_decades = bins[-1] / bins[0] < 100  # then 2s and 5s are labelled between powers
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _plain(x)))
        ax.xaxis.set_minor_formatter(
            FuncFormatter(lambda x, _: _plain(x) if few_decades and _lead(x) in (2, 5) else "")
        )
    if ax.get_legend_handles_labels()[0]:
        ax.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2, fontsize=8, frameon=False
        )


def _plain(x: float) -> str:
    """A tick label without exponents: `0.5`, `20`, `10,000`."""
    return f"{x:,.0f}" if x >= 1 else f"{x:g}"


def _lead(x: float) -> int:
    """The leading digit of a positive number (2 for 0.02, 200 and 2000)."""
    return round(x / 10 ** math.floor(math.log10(x))) if x > 0 else 0


def survival_figure(report: ABReport) -> Figure:
    """Per arm, the share of seeds without a stall over engine hours of exposure (Kaplan-Meier);
    `+` marks a seed that ran its length without a stall, `x` one that ended early."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 3.6), layout="constrained")
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
    # beside the axes: inside, it would cover the curves' ends
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    return fig


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
            tds.append(f"<td{css}>{escape(cell)}</td>")
        rows.append(f"<tr><td>{escape(label)}</td>{''.join(tds)}</tr>")
    return "<table>" + "".join(rows) + "</table>"


def _seed_table(report: ABReport) -> str:
    cols = ["arm", "seed", "stalled", "kind", "onset (s)", "stopped", "turns", "preemptions"]
    cols += ["restores recomputed", "decode tok/s", "clock", "like for like", "same run as"]
    rows = ["<tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"]

    for name, seeds in report.seeds.items():
        for r in seeds:
            cells = [name, *seed_cells(r)]
            rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


def _forensics(report: ABReport) -> str:
    """The stall forensics section, as in the markdown report (empty without a stall)."""
    arms = {name: arm.forensics for name, arm in report.arms.items()}
    items = bundle_items(arms, prefix_arm=len(arms) > 1)
    if not items:
        return ""
    lines = []
    for item in items:
        quoted = [f"<code>{escape(f)}</code>" for f in item.frames]
        quoted += [escape(item.scheduler)] if item.scheduler else []
        link = f'<a href="{escape(item.path)}/">{escape(item.path)}</a>'
        lines.append(f"<li>{escape(item.stall)}: {link} — {'; '.join(quoted) or 'no stack dump'}")
    return "<h2>Stall forensics</h2><ul>" + "</li>".join(lines) + "</li></ul>"


def _run_date(dirs: list[Path]) -> str:
    for d in dirs:
        started = read_meta(d).started_at
        if started is not None:
            return started[:10]
    return "unknown date"


def to_html(report: ABReport, run_dir: Path, timeline_svg: str | None = None) -> str:
    """The whole page (`timeline_svg`: the timeline figure already drawn, else drawn here)."""
    from stallkit.reports.timeline_plot import timeline_figure

    read = [d for dirs in report.dirs.values() for d in dirs]
    heading = f"{title(report)}, {_run_date(read)}"
    if timeline_svg is None:
        timeline_svg = _svg(timeline_figure(run_dir, heading, shown_dirs(report)))
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in footnotes(report))
    shown = " (each arm's first seed)" if report.seed_count > 1 else ""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(heading)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(heading)}</h1>",
        _table(report),
        notes,
        "<h2>Time to first stall (Kaplan-Meier)</h2>",
        _svg(survival_figure(report)),
        "<h2>Per seed</h2>",
        _seed_table(report),
        f"<h2>Timelines{shown}</h2>",
        timeline_svg,
        "<h2>Latency distributions (all seeds)</h2>",
        _svg(distributions_figure(run_dir, report.dirs or None)),
        _forensics(report),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
