"""sweep.html: where each arm stalls across a sweep's settings, as heat maps, self-contained.

One heat map per arm side by side: the first varied setting across, the second down, any
further settings as small multiples (one row of maps per combination of their values). A
square's colour is the share of its seeds that stalled (white none, red all); it reads `k/N`
and its tooltip gives the stall rate per engine hour with its exact interval. Every square
links to its cell in the table below, which gives each arm's figures, the cell's verdict and
the `kit ab` command that replays it. A load sweep (open-loop arrivals) adds a rate map: per arm,
requests done and goodput against the offered rate beside the y = x line, the rates at which
a seed stalled, and where the arm stops keeping up, starts stalling and last meets its SLOs.
Plain HTML, CSS and inline SVG: no script, nothing from the network.
"""

from __future__ import annotations

import itertools
from html import escape

from stallkit.contract.sweep import RateMap, RateSeries, Setting, SweepCell, SweepFile

__all__ = ["sweep_html"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
table.heat td { width: 3.2em; text-align: center; padding: 0; }
table.heat td a { display: block; padding: 0.35em 0; color: inherit; text-decoration: none; }
td.none { background: #eee; color: #999; }
.maps { display: flex; gap: 2.5em; flex-wrap: wrap; }
code { font-size: 0.85em; }
p.note { color: #555; font-size: 0.9em; }
tr:target { outline: 2px solid #06c; }
"""


def _value(v: Setting) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _colour(share: float) -> str:
    """White (no seed stalled) to red (every seed stalled)."""
    fade = round(255 * (1 - share))
    return f"rgb(255,{fade},{fade})" if share < 1 else "rgb(200,0,0)"


def _rate(cell: SweepCell) -> str:
    rate = cell.rate
    if rate.stall_rate_per_h is None or rate.ci95 is None:
        return "not observed"
    low, high = rate.ci95
    hours = rate.exposure_s / 3600
    return f"{rate.stall_rate_per_h:.2g}/h [{low:.2g}, {high:.2g}] over {hours:.1f} engine h"


def _square(cell: SweepCell | None) -> str:
    if cell is None or not cell.seeds:
        return '<td class="none">-</td>'
    stalled, seeds = len(cell.stalled_seeds), len(cell.seeds)
    share = stalled / seeds
    style = f"background:{_colour(share)};" + ("color:#fff;" if share > 0.6 else "")
    tip = escape(f"{cell.arm}: {stalled} of {seeds} seeds stalled; {_rate(cell)}")
    return (
        f'<td style="{style}" title="{tip}"><a href="#cell-{cell.cell}">{stalled}/{seeds}</a></td>'
    )


def _heat_map(content: SweepFile, arm: str, fixed: dict[str, Setting]) -> str:
    axes = content.plan.axes
    x = axes[0]
    y = axes[1] if len(axes) > 1 else None
    lookup = {
        tuple(sorted((k, repr(v)) for k, v in c.settings.items())): c
        for c in content.cells
        if c.arm == arm
    }

    def cell_at(xv: Setting, yv: Setting | None) -> SweepCell | None:
        settings = {**fixed, x.key: xv, **({y.key: yv} if y is not None else {})}
        return lookup.get(tuple(sorted((k, repr(v)) for k, v in settings.items())))

    head = "".join(f"<th>{escape(_value(v))}</th>" for v in x.values)
    corner = escape(f"{y.key} \u2193 / {x.key} \u2192" if y else f"{x.key} \u2192")
    rows = [f"<tr><th>{corner}</th>{head}</tr>"]
    for yv in y.values if y is not None else [None]:
        label = escape(_value(yv)) if yv is not None else ""
        squares = "".join(_square(cell_at(xv, yv)) for xv in x.values)
        rows.append(f"<tr><th>{label}</th>{squares}</tr>")
    return f'<div><h4>{escape(arm)}</h4><table class="heat">{"".join(rows)}</table></div>'


def _maps(content: SweepFile) -> list[str]:
    rest = content.plan.axes[2:]
    out = []
    for combo in itertools.product(*(a.values for a in rest)):
        fixed = {a.key: v for a, v in zip(rest, combo, strict=True)}
        if fixed:
            where = ", ".join(f"{k} = {_value(v)}" for k, v in fixed.items())
            out.append(f"<h3>{escape(where)}</h3>")
        maps = "".join(_heat_map(content, arm, fixed) for arm in content.plan.arms)
        out.append(f'<div class="maps">{maps}</div>')
    return out


def _num(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.3g}{unit}"


def _svg(series: RateSeries) -> str:
    """Achieved rate (and goodput) against the offered rate, with the y = x line."""
    w, h, pad = 360, 240, 40
    points = series.points
    top = max(
        [p.offered_rps for p in points]
        + [v for p in points for v in (p.achieved_rps, p.goodput_rps) if v is not None]
    )
    top = top * 1.08 or 1.0

    def xy(x: float, y: float) -> str:
        return f"{pad + x / top * (w - pad - 10):.1f},{h - pad - y / top * (h - pad - 10):.1f}"

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">']
    out.append(f'<rect x="{pad}" y="10" width="{w - pad - 10}" height="{h - pad - 10}" '
               'fill="none" stroke="#999"/>')  # fmt: skip
    if series.unit == "requests":
        out.append(f'<polyline points="{xy(0, 0)} {xy(top, top)}" stroke="#999" '
                   'stroke-dasharray="4 3" fill="none"><title>y = x: every offered request '
                   'done</title></polyline>')  # fmt: skip
    lines = [("achieved_rps", "#06c", "requests done/s"), ("goodput_rps", "#080", "goodput/s")]
    for field, colour, words in lines:
        known = [(p, getattr(p, field)) for p in points if getattr(p, field) is not None]
        if not known:
            continue
        path = " ".join(xy(p.offered_rps, v) for p, v in known)
        out.append(f'<polyline points="{path}" stroke="{colour}" fill="none" stroke-width="2"/>')
        for p, v in known:
            stalled = p.stalled_seeds > 0
            fill = "#c00" if stalled else colour
            tip = escape(f"{words} {v:.3g} at {p.offered_rps:.3g} offered/s; "
                         f"{p.stalled_seeds} of {p.seeds} seeds stalled")  # fmt: skip
            x, y = xy(p.offered_rps, v).split(",")
            out.append(f'<circle cx="{x}" cy="{y}" r="{5 if stalled else 3.5}" fill="{fill}">'
                       f"<title>{tip}</title></circle>")  # fmt: skip
    for value in (0.0, top / 2, top):  # ticks: the axes share one scale
        x, y = xy(value, 0.0).split(",")
        out.append(f'<text x="{x}" y="{h - pad + 14}" text-anchor="middle" '
                   f'font-size="10">{value:.2g}</text>')  # fmt: skip
        x, y = xy(0.0, value).split(",")
        out.append(f'<text x="{pad - 4}" y="{y}" text-anchor="end" '
                   f'font-size="10">{value:.2g}</text>')  # fmt: skip
    out.append(f'<text x="{w / 2:.0f}" y="{h - 8}" text-anchor="middle" font-size="12">'
               f"offered {series.unit}/s</text>")  # fmt: skip
    out.append(f'<text x="10" y="{h / 2:.0f}" font-size="12" transform="rotate(-90 10 '
               f'{h / 2:.0f})" text-anchor="middle">done per s</text></svg>')  # fmt: skip
    return "".join(out)


def _rate_rows(series: RateSeries) -> str:
    head = "<tr><th>offered/s</th><th>done/s</th><th>goodput/s</th><th>SLO met</th>"
    head += "<th>lag p99</th><th>stalled</th></tr>"
    rows = [head]
    for p in series.points:
        rows.append(
            f'<tr><td><a href="#cell-{p.cell}">{p.offered_rps:.3g}</a></td>'
            f"<td>{_num(p.achieved_rps)}</td><td>{_num(p.goodput_rps)}</td>"
            f"<td>{_num(p.attainment_pct, ' %')}</td><td>{_num(p.lag_p99_s, ' s')}</td>"
            f"<td>{p.stalled_seeds}/{p.seeds}</td></tr>"
        )
    return f"<table>{''.join(rows)}</table>"


def rate_summary(series: RateSeries, rates: RateMap) -> str:
    """Where an arm keeps up, stalls and meets the SLOs, in one line (sweep.html, `kit sweep`)."""
    parts = []
    slo = any(p.goodput_rps is not None for p in series.points)
    within = " within the SLOs" if slo else ""
    if series.unit == "requests":
        keeps = series.keeps_up_rps
        parts.append(
            f"keeps up (\u2265 {rates.keep_up_pct:g} % of the offered rate done{within}) "
            f"to {_num(keeps, '/s')}"
            if keeps is not None
            else "falls behind from the lowest rate"
        )
    stalls = series.stalls_from_rps
    parts.append(f"stalls from {stalls:.3g}/s" if stalls is not None else "never stalled")
    if any(p.attainment_pct is not None for p in series.points):
        best = series.slo_max_rps
        parts.append(
            f"meets the SLOs (\u2265 {rates.slo_target_pct:g} %, no stall) to {_num(best, '/s')}"
            if best is not None
            else "misses the SLOs from the lowest rate"
        )
    return "; ".join(parts)


def _rate_map(content: SweepFile) -> list[str]:
    rates = content.rate_map
    if rates is None:
        return []
    out = [
        "<h2>Rate map</h2>",
        '<p class="note">Per arm, requests done per engine second (blue) and goodput '
        "(green, with [slo]) against the offered arrival rate; where a line falls below the "
        "dashed y = x the arm stops keeping up. A red dot: a seed stalled at that rate.</p>",
    ]
    charts = []
    for series in rates.series:
        where = ", ".join(f"{k} = {_value(v)}" for k, v in series.fixed.items())
        title = series.arm + (f" ({where})" if where else "")
        charts.append(
            f"<div><h4>{escape(title)}</h4>{_svg(series)}"
            f'<p class="note">{escape(rate_summary(series, rates))}</p>{_rate_rows(series)}</div>'
        )
    out.append(f'<div class="maps">{"".join(charts)}</div>')
    return out


def _cell_table(content: SweepFile) -> str:
    arms = list(content.plan.arms)
    keys = [a.key for a in content.plan.axes]
    head = "".join(f"<th>{escape(k)}</th>" for k in keys)
    head += "".join(f"<th>{escape(a)}: stalled</th><th>{escape(a)}: rate</th>" for a in arms)
    head += "<th>verdict</th><th>replay</th>"
    by_cell: dict[int, dict[str, SweepCell]] = {}
    for c in content.cells:
        by_cell.setdefault(c.cell, {})[c.arm] = c
    rows = [f"<tr>{head}</tr>"]
    for index, per_arm in by_cell.items():
        first = next(iter(per_arm.values()))
        tds = "".join(f"<td>{escape(_value(first.settings[k]))}</td>" for k in keys)
        for arm in arms:
            one = per_arm.get(arm)
            stalled = f"{len(one.stalled_seeds)}/{len(one.seeds)}" if one else "-"
            kinds = ", ".join(f"{k} {n}" for k, n in one.kinds.items()) if one else ""
            tds += f"<td>{escape(stalled)}{' (' + escape(kinds) + ')' if kinds else ''}</td>"
            tds += f"<td>{escape(_rate(one)) if one else '-'}</td>"
        v = first.verdict
        verdict = f"{v.reason} (p = {v.p_value:.3g})" if v else "-"
        tds += f"<td>{escape(verdict)}</td><td><code>{escape(first.replay)}</code></td>"
        rows.append(f'<tr id="cell-{index}">{tds}</tr>')
    return f"<table>{''.join(rows)}</table>"


def _summary(content: SweepFile) -> str:
    lines = []
    for arm in content.plan.arms:
        cells = [c for c in content.cells if c.arm == arm and c.seeds]
        hit = [c for c in cells if c.stalled_seeds]
        stalls = sum(len(c.stalled_seeds) for c in cells)
        runs = sum(len(c.seeds) for c in cells)
        lines.append(
            f"<li><b>{escape(arm)}</b> ({escape(content.plan.arms[arm])}): stalled in "
            f"{len(hit)} of {len(cells)} cells, {stalls} of {runs} runs</li>"
        )
    return f"<ul>{''.join(lines)}</ul>"


def sweep_html(content: SweepFile) -> str:
    """The whole page."""
    plan = content.plan
    cells = len(plan.cells())
    title = (
        f"Sweep of {plan.kit_name}: {cells} cells \u00d7 {len(plan.seeds)} seeds \u00d7 "
        f"{len(plan.arms)} arms, {plan.duration_s:g} engine s per run"
    )
    missing = (
        f" {content.missing} runs of the plan are missing (interrupted: `kit sweep --resume`)."
        if content.missing
        else ""
    )
    note = (
        f"{content.runs} runs on the virtual clock.{missing} A square is one cell on one arm: "
        "the seeds that stalled of those that ran, shaded from white (none) to red (all); "
        "hover for the stall rate per engine hour with its exact 95 % interval, click for "
        "the cell's figures and the command that replays it."
    )
    body = [
        f"<h1>{escape(title)}</h1>",
        _summary(content),
        f'<p class="note">{escape(note)}</p>',
        *_maps(content),
        *_rate_map(content),
        "<h2>Cells</h2>",
        _cell_table(content),
    ]
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )
