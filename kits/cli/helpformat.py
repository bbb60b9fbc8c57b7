"""How every `kit` command prints its help: one metavar style, text wrapped between words.

Every command and group of the command line is built as a `KitCommand` or `KitGroup`
(`styled(app)` sets them on a typer app before its commands are made), so every help page
reads alike:

- a value's metavar is an upper-case name: the one its option declares (`URL`, `SPEC`, `FILE`)
  or its type's (`TEXT`, `INTEGER`, `FLOAT`, `PATH`); a choice lists its values (`[base|fix]`);
- an argument is its upper-case name, in the usage line too (`URL`, `[URL]` when optional);
- text wraps only at spaces: no word, path, flag or spec is cut, nor broken at its hyphens.
  A token longer than its column runs past the edge instead, which the help tests catch: write
  long lists with spaces (`sim:base | sim:fix`), not as one token.
"""

from __future__ import annotations

import importlib
import textwrap
from collections.abc import Iterator, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args, get_origin

import typer
import typer.core
from typer.core import TyperCommand, TyperGroup
from typer.models import DefaultPlaceholder

if TYPE_CHECKING:  # typer's own copy of click, whose classes its commands use
    from typer._click import Context, HelpFormatter, Parameter
else:
    _click = getattr(typer.core, "_click", None) or importlib.import_module("click")
    Context, HelpFormatter = _click.Context, _click.HelpFormatter

#: a value's type -> its metavar, where the option declares none
TYPE_METAVARS: dict[type, str] = {
    str: "TEXT",
    int: "INTEGER",
    float: "FLOAT",
    bool: "BOOLEAN",
    Path: "PATH",
}


def _wrap(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    """`text`'s paragraphs filled to `width`, broken only at spaces (a paragraph led by a `\\b`
    line is kept as written)."""
    lines: list[str] = []
    for paragraph in text.split("\n\n"):
        if lines:
            lines.append("")
        if paragraph.startswith("\b\n"):
            lines += [rest + line for line in paragraph.splitlines()[1:]]
            continue
        wrapper = textwrap.TextWrapper(
            width=max(width, len(first) + 10),
            initial_indent=first if not lines else rest,
            subsequent_indent=rest,
            break_long_words=False,
            break_on_hyphens=False,
        )
        joined = " ".join(line.strip() for line in paragraph.splitlines())
        lines += wrapper.wrap(joined) or [wrapper.initial_indent]
    return lines


class KitHelpFormatter(HelpFormatter):
    """click's help formatter, wrapping at spaces only."""

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        start = f"{'Usage: ' if prefix is None else prefix:>{self.current_indent}}{prog} "
        width = self.width - self.current_indent
        if width >= len(start) + 20:
            self.write("\n".join(_wrap(args, width, start, " " * len(start))) + "\n")
        else:  # a long command path: its arguments on the lines below
            indent = " " * (self.current_indent + 4)
            self.write(f"{start}\n" + "\n".join(_wrap(args, width, indent, indent)) + "\n")

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        self.write("\n".join(_wrap(text, self.width, indent, indent)) + "\n")

    def write_dl(
        self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        rows = list(rows)
        first_col = min(max((len(term) for term, _ in rows), default=0), col_max) + col_spacing
        indent = " " * self.current_indent
        pad = " " * (self.current_indent + first_col)
        for term, text in rows:
            if not text:
                self.write(f"{indent}{term}\n")
                continue
            lines = _wrap(text, max(self.width - first_col - self.current_indent, 10))
            if len(term) <= first_col - col_spacing:
                head = f"{indent}{term:<{first_col}}"
            else:  # a long term: its text starts on the next line
                self.write(f"{indent}{term}\n")
                head = pad
            self.write(head + lines[0] + "\n" + "".join(f"{pad}{line}\n" for line in lines[1:]))


class KitContext(Context):
    """The context of every `kit` command: its help goes through `KitHelpFormatter`."""

    formatter_class = KitHelpFormatter


def metavar(param: Parameter) -> str | None:
    """The metavar help shows for `param` (None for a flag, which takes no value)."""
    if param.metavar is not None:
        return param.metavar
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    if param.param_type_name == "argument":
        return (param.name or "VALUE").upper()
    descriptor = getattr(param, "type_descriptor", None)  # typer's own parameter types
    if descriptor is None:  # typer over click: click's type names (TEXT, INTEGER, ...)
        return str(getattr(getattr(param, "type", None), "name", "value")).upper()
    if descriptor.is_choice:
        return "[" + "|".join(str(_value(c)) for c in descriptor.choices or ()) + "]"
    annotation = descriptor.annotation
    if get_origin(annotation) in (list, tuple):
        annotation = get_args(annotation)[0]
    return TYPE_METAVARS.get(annotation, "VALUE")


def _value(choice: object) -> object:
    return choice.value if isinstance(choice, Enum) else choice


def _name_values(params: Sequence[Parameter]) -> None:
    for param in params:
        param.metavar = metavar(param)


def _usage(command: TyperCommand | TyperGroup, ctx: Context) -> list[str]:
    pieces = [command.options_metavar] if command.options_metavar else []
    for param in command.get_params(ctx):
        if param.param_type_name != "argument":
            pieces += param.get_usage_pieces(ctx)
            continue
        name = f"{param.metavar}..." if param.nargs != 1 else str(param.metavar)
        pieces.append(name if param.required else f"[{name}]")
    return pieces


def _format_params(
    command: TyperCommand | TyperGroup, ctx: Context, formatter: HelpFormatter
) -> None:
    arguments: list[tuple[str, str]] = []
    options: list[tuple[str, str]] = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        if param.param_type_name == "argument":  # its name, without typer's `<type>`
            arguments.append((str(param.metavar), record[1]))
        else:
            options.append(record)
    for title, rows in (("Arguments", arguments), ("Options", options)):
        if rows:
            with formatter.section(title):
                formatter.write_dl(rows)


class KitCommand(TyperCommand):
    """A `kit` command: its values named in the one metavar style, its help wrapped at spaces."""

    context_class = KitContext

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _name_values(self.params)

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        return _usage(self, ctx)

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        _format_params(self, ctx, formatter)


class KitGroup(TyperGroup):
    """A `kit` group (`kit`, `kit sim`, ...): its help in the same style as its commands'."""

    context_class = KitContext

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _name_values(self.params)

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        return [*_usage(self, ctx), self.subcommand_metavar]

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        _format_params(self, ctx, formatter)
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """Each command's whole summary, wrapped (click cuts it at 45 characters with `...`)."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _apps(app: typer.Typer) -> Iterator[typer.Typer]:
    yield app
    for group in app.registered_groups:
        if group.typer_instance is not None:
            yield from _apps(group.typer_instance)


def styled(app: typer.Typer) -> typer.Typer:
    """Build `app`'s commands and groups (and those of the apps it adds) as `KitCommand` and
    `KitGroup`, unless one chose a class of its own. Call it before typer makes the commands."""
    for each in _apps(app):
        if isinstance(each.info.cls, DefaultPlaceholder) or each.info.cls is TyperGroup:
            each.info.cls = KitGroup
        for command in each.registered_commands:
            if command.cls in (None, TyperCommand):  # typer's own default
                command.cls = KitCommand
    return app
