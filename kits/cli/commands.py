"""The list of `kit` commands and the group that builds each one only when it is needed.

A command's module (and with it the config models its flags are derived from) is imported
only when that command runs or prints its own help, so `kit --help` stays instant: the list
below carries each command's summary line.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

import typer
import typer.core

from stallkit.kits.cli.helpformat import KitGroup, styled

if TYPE_CHECKING:  # typer's own copy of click, whose classes the group's methods take
    from typer._click import Command, Context, HelpFormatter

#: command -> (the `stallkit.kits.cli` module whose `register` adds it, the line `kit --help` shows)
COMMANDS: dict[str, tuple[str, str]] = {
    "load": ("load", "Drive many streaming agents against a running server."),
    "monitor": ("monitor", "Attach to a running engine: live metrics, stall detection."),
    "run": ("run", "Run one arm of a kit: engine, agents, monitor, report."),
    "ab": ("ab", "A/B: the same kit and seeds on a base and a fix engine."),
    "report": ("report", "Re-make the reports of a saved run directory."),
    "rules": ("rules", "Write the stall rule as Prometheus rules, with a dashboard."),
    "backtest": ("backtest", "Replay the stall detector over a fleet's history."),
    "schema": ("schema", "The JSON Schemas of a run directory's files."),
    "sweep": ("sweep", "Sweep a kit's settings x seeds x arms on the virtual clock: stall maps."),
    "hunt": ("hunt", "Search a space of kit settings for one where an arm stalls; shrink it."),
    "corpus": ("corpus", "Known stalls (the fork's, vLLM's, LMCache's) replayed and checked."),
    "sim": ("sim", "The embedded simulated engine: serve it, or trace its steps."),
    "trace": ("trace", "Traces: their numbers, a run or a kit's workload written as one."),
    "engine": (
        "engine",
        "Prepare engines: the tiny CPU model, the engine image, the twin's calibration and "
        "vLLM releases, vLLM's scheduler tests.",
    ),
}


class LazyGroup(KitGroup):
    """The top-level group: builds a command from its module the first time it is needed (every
    command in the kit's help style, `stallkit.kits.cli.helpformat`)."""

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in COMMANDS if n not in self.commands)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            family = typer.Typer(rich_markup_mode=None, add_completion=False)
            importlib.import_module(f"stallkit.kits.cli.{COMMANDS[cmd_name][0]}").register(family)
            styled(family)
            self.commands.update(typer.main.get_group(family).commands)
        return self.commands.get(cmd_name)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command line; a mistake in it (an unknown or missing option, a value of the
        wrong type) is one red line with a hint and exit code 2, like every other user error.
        SIGTERM stops any command as Ctrl-C does."""
        if not kwargs.get("standalone_mode", True):
            return super().main(*args, **kwargs)
        from stallkit.kits.cli.common import fail, sigterm_as_ctrl_c

        # typer's own copy of click (newer typer) or click itself: the one its classes use
        click: Any = getattr(typer.core, "_click", None) or importlib.import_module("click")
        try:
            with sigterm_as_ctrl_c():
                code = super().main(*args, **{**kwargs, "standalone_mode": False})
        except click.exceptions.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "kit"
            # a command with no_args_is_help: its message is the whole help, not one line
            no_args = isinstance(exc, click.exceptions.NoArgsIsHelpError)
            # one line (click lists a choice's values one a line), without pydantic's prefix
            said = " ".join(exc.format_message().split()).replace("Value error, ", "")
            message = f"`{where}` needs arguments" if no_args else said
            sys.exit(fail(message, f"see `{where} --help`", exc.exit_code).exit_code)
        except click.exceptions.ClickException as exc:
            sys.exit(fail(exc.format_message(), "", exc.exit_code).exit_code)
        except typer.Abort:  # click's own, or typer's where typer carries its copy of click
            print("Aborted!", file=sys.stderr)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, summary) in COMMANDS.items()])
