"""`kit report`: re-make the reports of a saved run directory (`kit ab` or `kit run`), over
what it holds, and print its table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stallkit.kits.cli.ab import EXIT_STRICT
from stallkit.kits.cli.common import fail, user_errors


@user_errors
def report(
    run_dir: Annotated[Path, typer.Argument(help="A directory written by `kit ab` or `kit run`")],
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Exit 1 when the fix arm stalled, died, was cut short or logged a traceback in "
            "any seed, as `kit ab --strict` does",
        ),
    ] = False,
    partial: Annotated[
        bool,
        typer.Option(
            "--partial",
            help="Report over what the run holds: a run cut short (Ctrl-C) gets its verdict over "
            "the seeds recorded (without it: 'interrupted: partial, N of M seeds' in its place); "
            "when some seeds' files cannot be read, the report covers the readable seeds and "
            "lists the damaged ones (without it: exit 1, naming each damaged seed and file)",
        ),
    ] = False,
) -> None:
    """Re-make ab.html, ab.md, ab.json (run.* for one arm) and timeline.png; print the table."""
    from rich.console import Console

    from stallkit.kits.ab.execute import strict_failures
    from stallkit.reports import DamagedRunError, ab_table, write_reports

    try:
        result = write_reports(run_dir, partial)
    except DamagedRunError as exc:  # the run's data, not the command line: exit 1
        raise fail(exc.message, exc.hint, code=1) from None
    Console().print(ab_table(result))
    stem = run_dir / result.stem
    typer.echo(f"wrote {stem}.html, {stem}.md, {stem}.json, {run_dir / 'timeline.png'}")
    cut = result.partial_run
    if cut is not None and not cut.verdict_given and result.stem == "ab":
        Console().print(
            f"no verdict: the run was cut short; `kit report --partial {run_dir}` makes one over "
            "the seeds recorded",
            markup=False,
            highlight=False,
        )
    problems = strict_failures(result) if strict else []
    if problems:
        raise fail("strict: " + "; ".join(problems), f"see {stem}.md", code=EXIT_STRICT)


def register(app: typer.Typer) -> None:
    """Add `kit report` to the command line."""
    app.command("report")(report)
