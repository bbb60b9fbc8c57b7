"""The A/B table as a rich renderable (printed at the end of `kit ab` and `kit report`)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from reports.ab import ABReport, footnotes, table_rows


def ab_table(report: ABReport) -> RenderableType:
    """One column per arm; stall cells in red, clean ones in green; footnotes below."""
    table = Table(title=report.title, title_justify="left", show_lines=False)
    table.add_column("")
    for name, arm in report.arms.items():
        table.add_column(f"{name}\n{arm.spec}", justify="right")
    for key, label, cells in table_rows(report):
        styled = [
            Text(c, style=("red" if c != "none" else "green") if key == "stalls" else "")
            for c in cells
        ]
        table.add_row(label, *styled)
    notes = [Text(n, style="dim") for n in footnotes(report)]
    return Group(table, *notes)
