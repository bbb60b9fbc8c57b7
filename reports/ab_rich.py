"""The A/B table as a rich renderable (printed at the end of `kit ab` and `kit report`).

The table's layout follows the terminal: where its rows fit on one line each, one column per
arm with the rows and cells of `ab.md`; in a narrower terminal (80 columns), a compact table
with shorter labels and cells (the same figures, fewer words), the verdict as a line under it
and the footnotes wrapped. Either way, stall cells are red, clean ones green.
"""

from __future__ import annotations

import re

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from stallkit.reports.ab_figures import ABReport
from stallkit.reports.ab_markdown import FLAG, footnotes, rate_cell, stall_cell, table_rows
from stallkit.reports.ab_slo import NONINFERIOR, SHOWN
from stallkit.reports.seed_stats import onset_spread

#: a compact row's label, by row key (log rows keep their pattern's name, without "(log)")
_SHORT_LABELS = {
    "seeds": "stalled seeds",
    "onset": "onset: median (range)",
    "rate": "stalls/engine h, 95 %",
    "stalls": "stalls, longest",
    "turns": "turns/errors/timeouts",
    "kv": "max KV usage",
    "cached": "prompt from cache",
    "slo": "SLOs",
    **{spec.key: spec.short_label for spec in SHOWN if spec.short_label},
}
#: rows whose cell is a sentence: lines under the compact table, left out of its measure
_SENTENCES = ("verdict", NONINFERIOR)
_LOG_SUFFIX = " (log)"
#: the rows of estimates over seeds (ab_slo's), and a cell whose interval repeats its unit
#: (`12.2 ms (11.9 ms - 12.4 ms)`, which wrapped in an 80-column table)
_ESTIMATES = tuple(spec.key for spec in SHOWN)
_ESTIMATE = re.compile(
    r"^(?P<mean>\S+)(?P<unit> \S+)? \((?P<low>\S+)(?P=unit)? - (?P<high>\S+)(?P=unit)?\)$"
)
#: a width no table reaches, to measure the wide table unwrapped
_UNBOUNDED = 100_000

Row = tuple[str, str, list[str]]


def ab_table(report: ABReport) -> RenderableType:
    """The A/B table with its verdict and footnotes, laid out for the console's width."""
    return ABTable(report)


class ABTable:
    """One column per arm; the wide layout where it fits, else the compact one."""

    def __init__(self, report: ABReport) -> None:
        self.report = report

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        rows = table_rows(self.report)
        # the verdict's cell wraps in any terminal: the other rows decide the layout
        unwrapped = _wide_table(self.report, [r for r in rows if r[0] not in _SENTENCES])
        unbounded = options.update(max_width=_UNBOUNDED)
        if Measurement.get(console, unbounded, unwrapped).maximum <= options.max_width:
            yield wide_layout(self.report, rows)
        else:
            yield compact_layout(self.report, rows)


def _styled(key: str, cells: list[str]) -> list[Text]:
    return [
        Text(c, style=("red" if c != "none" else "green") if key == "stalls" else "") for c in cells
    ]


def _notes(report: ABReport) -> list[Text]:
    return [Text(n, style="dim") for n in footnotes(report)]


def _wide_table(report: ABReport, rows: list[Row]) -> Table:
    table = Table(title=report.title, title_justify="left", show_lines=False)
    table.add_column("")
    for name, arm in report.arms.items():
        table.add_column(f"{name}\n{arm.spec}", justify="right")
    for key, label, cells in rows:
        table.add_row(label, *_styled(key, cells))
    return table


def wide_layout(report: ABReport, rows: list[Row] | None = None) -> RenderableType:
    """The rows and cells of `ab.md`, one column per arm, footnotes below."""
    table = _wide_table(report, table_rows(report) if rows is None else rows)
    return Group(table, *_notes(report))


def compact_layout(report: ABReport, rows: list[Row] | None = None) -> RenderableType:
    """Short labels and cells, the verdict as a line under the table, footnotes wrapped."""
    table = Table(
        title=report.title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    table.add_column("")
    for name, arm in report.arms.items():
        table.add_column(f"{name}\n{arm.spec}", justify="right", overflow="fold")
    verdict: list[Text] = []
    for key, label, cells in table_rows(report) if rows is None else rows:
        if key == "verdict":
            text = next((c for c in cells if c), "")
            if report.verdict is None:  # a run cut short: what it is, in place of a verdict
                verdict.append(Text(text, style="bold yellow"))
                continue
            verdict.append(Text.assemble(("verdict: ", "bold"), text))
            continue
        if key == NONINFERIOR:  # a sentence: "fix is not worse ... on goodput: yes (...)"
            verdict.append(Text.assemble((f"{label}: ", "bold"), next((c for c in cells if c), "")))
            continue
        short = [
            _short_cell(report, key, name, cell)
            for name, cell in zip(report.arms, cells, strict=True)
        ]
        table.add_row(_short_label(key, label), *_styled(key, short))
    return Group(table, *verdict, *_notes(report))


def _short_label(key: str, label: str) -> str:
    if key == "log":
        return label.removesuffix(_LOG_SUFFIX)
    return _SHORT_LABELS.get(key, label)


def _short_cell(report: ABReport, key: str, arm: str, cell: str) -> str:
    """The compact form of one cell (the cell itself where it is short already)."""
    flag = FLAG if cell.endswith(FLAG) else ""
    if key == "rate" and arm in report.rates:
        return rate_cell(report.rates[arm], short=True) + flag
    if key == "onset" and arm in report.seeds:
        return short_onset(onset_spread(report.seeds[arm])) + flag
    if key == "stalls":
        return stall_cell(report.arms[arm], short=True) + flag
    return short_estimate(cell) if key in _ESTIMATES else cell


def short_estimate(cell: str) -> str:
    """`12.2 ms (11.9-12.4)`: an estimate's interval without its repeated unit (a cell whose
    ends have another unit, or that is no estimate, as it is)."""
    found = _ESTIMATE.match(cell)
    if found is None:
        return cell
    unit = found["unit"] or ""
    return f"{found['mean']}{unit} ({found['low']}-{found['high']})"


def short_onset(spread: tuple[float, float, float] | None) -> str:
    """`2454 s (501-4159)`: the median onset and its range, engine seconds."""
    if spread is None:
        return "-"
    median, low, high = spread
    return f"{median:.0f} s" + ("" if low == high else f" ({low:.0f}-{high:.0f})")
