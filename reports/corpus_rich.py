"""The corpus table: one row per replayed case, from its outcome (`stallkit.contract.corpus`).

Columns: the case, the upstream report, the buggy engine (stalled seeds as `k/N`, the first
stall's kind and the earliest onset), the fixed engine (`k/N`, seeds cut short; "no fix" for a case without one), wall time,
and whether it reproduced (with why not below).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from stallkit.contract.corpus import CaseOutcome, EngineOutcome

__all__ = ["corpus_table", "engine_cell"]

_STATUS = {
    "reproduced": "[green]yes[/]",
    "not_reproduced": "[bold red]NO[/]",
    "skipped": "[yellow]skipped[/]",
    "interrupted": "[yellow]stopped[/]",
}


def engine_cell(engine: EngineOutcome | None, buggy: bool) -> str:
    """`k/N` (stalled seeds of those run) with, for the buggy engine, the first stall's kind and earliest onset."""
    if engine is None:
        return "-"
    text = f"{engine.stalled}/{engine.seeds}"
    if buggy and engine.kinds:
        kinds = sorted(set(engine.kinds))
        text += f" {'/'.join(kinds)}"
    if buggy and engine.first_onset_s is not None:
        text += f" at {engine.first_onset_s:,.0f} s"
    if engine.censored:
        text += f" ({engine.censored} cut short)"
    return text


def corpus_table(outcomes: Sequence[CaseOutcome]) -> Table:
    """The table of `outcomes`; a row's reason (why not reproduced, why skipped) below it."""
    table = Table(show_edge=False, title="stall corpus")
    table.add_column("case", no_wrap=True)
    table.add_column("report", no_wrap=True)
    table.add_column("buggy: stalled")
    for column in ("fixed", "wall", "ok"):
        table.add_column(column, no_wrap=True)
    for outcome in outcomes:
        table.add_row(
            outcome.case,
            outcome.report,
            engine_cell(outcome.buggy, buggy=True),
            engine_cell(outcome.fixed, buggy=False) if outcome.has_fix else "no fix",
            f"{outcome.wall_s:.0f} s" if outcome.status != "skipped" else "-",
            _STATUS[outcome.status],
        )
        if outcome.reason:
            table.add_row("", f"[dim]{outcome.reason}[/]", "", "", "", "")
    return table
