"""The `kit` command line: a thin hub that registers each role's commands.

Command modules import their heavy dependencies inside the command functions so that
`kit --help` stays instant.
"""

from __future__ import annotations

import typer

from kits import cli_engine, cli_load, cli_monitor, cli_rules, cli_run, cli_sim

app = typer.Typer(
    name="kit",
    help=(
        "stallkit: load-test vLLM-style engines with many streaming agents, detect stalls "
        "live, and prove scheduler fixes with A/B runs. Start with `kit ab` (simulator)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

cli_sim.register(app)
cli_engine.register(app)
cli_load.register(app)
cli_monitor.register(app)
cli_run.register(app)
cli_rules.register(app)


def main() -> None:
    """Console-script entry point."""
    app()
