"""The `kit` command line: a thin hub over one module per command family.

A command's module (and with it the config models its flags are derived from) is imported
only when that command runs or prints its own help, so `kit --help` stays instant: the list
of commands below carries each one's summary line.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperGroup

from kits.cli.common import help_when_bare

if TYPE_CHECKING:  # typer's own copy of click, whose classes the group's methods take
    from typer._click import Command, Context, HelpFormatter

#: command -> (the `kits.cli` module whose `register` adds it, the line `kit --help` shows)
COMMANDS: dict[str, tuple[str, str]] = {
    "load": ("load", "Drive many streaming agents against a running server."),
    "monitor": ("monitor", "Attach to a running engine: live metrics, stall detection."),
    "run": ("run", "Run one arm of a kit: engine, agents, monitor, report."),
    "ab": ("run", "A/B: the same kit and seeds on a base and a fix engine."),
    "report": ("run", "Re-make the reports of a saved run directory."),
    "rules": ("rules", "Write the stall rule as Prometheus rules, with a dashboard."),
    "sim": ("sim", "The embedded simulated engine: serve it, or trace its steps."),
    "engine": ("engine", "Prepare engines: the tiny CPU model, the engine image."),
}


class LazyGroup(TyperGroup):
    """The top-level group: builds a command from its module the first time it is needed."""

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in COMMANDS if n not in self.commands)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            family = typer.Typer(rich_markup_mode=None, add_completion=False)
            importlib.import_module(f"kits.cli.{COMMANDS[cmd_name][0]}").register(family)
            self.commands.update(typer.main.get_group(family).commands)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, summary) in COMMANDS.items()])


app = typer.Typer(
    name="kit",
    cls=LazyGroup,
    help=(
        "stallkit: load-test vLLM-style engines with many streaming agents, detect stalls "
        "live, and prove scheduler fixes with A/B runs. Start with `kit ab` (simulator)."
    ),
    # bare `kit` prints the help and exits 0 (the callback below), not a usage error
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain help: typer's rich panels show a `<bool>` type beside every flag
    rich_markup_mode=None,
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("stallkit")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


@app.callback()
def _root(
    ctx: typer.Context,
    show_version: Annotated[
        bool, typer.Option("--version", help="Print the version and exit.", is_eager=True)
    ] = False,
) -> None:
    if show_version:
        typer.echo(f"stallkit {_version()}")
        raise typer.Exit(0)
    help_when_bare(ctx)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="kit")
