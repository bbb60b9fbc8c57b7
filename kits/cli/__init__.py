"""The `kit` command line: a thin hub over one module per command family.

Each command is built from its module only when it runs or shows its help (`stallkit.kits.cli.commands`
lists them), so that `kit --help` stays instant.
"""

from __future__ import annotations

from typing import Annotated

import typer

from stallkit.kits.cli.commands import LazyGroup
from stallkit.kits.cli.common import help_when_bare

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
    # `-h` is `--help` for every command (the contexts below the root inherit it)
    context_settings={"help_option_names": ["-h", "--help"]},
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
