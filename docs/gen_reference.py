"""Write the documentation's reference pages from the code: every kit key, every command's help.

`docs/reference/kit.md` walks the kit's pydantic model (`stallkit.kits.kit.Kit` and every model
nested in it): one table per TOML table, each key with its type, default and description.
`docs/reference/corpus-case.md` does the same for a corpus case's file
(`stallkit.contract.corpus.CaseFile`). `docs/reference/cli.md` walks the `kit` command tree
and prints each command's `--help` at a fixed width. The files are committed, so they read on any code host; `python
docs/gen_reference.py` rewrites them, `--check` exits 1 naming the stale ones (the test suite
runs it), so the reference cannot drift from the code it describes.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import types
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import typer.core
import typer.main
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo
from pydantic.json_schema import WithJsonSchema
from pydantic_core import PydanticUndefined

REFERENCE = Path(__file__).resolve().parent / "reference"
#: the width every help page is printed at (help wraps to the terminal; the page must not)
HELP_WIDTH = 100
#: the placeholder for a table keyed by name (an arm's name, a stage's index)
NAME = "<name>"

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean", Any: "any"}


def _model_of(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """The model a field holds and the key suffix that reaches one (`""` for the model itself,
    `.<name>` for a table of them, `[]` for a list of them)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    if origin is Annotated:
        return _model_of(args[0])
    if origin in (Union, types.UnionType):
        found = [m for a in args if a is not type(None) and (m := _model_of(a)) is not None]
        return found[0] if len(found) == 1 else None
    if origin is dict and len(args) == 2:
        inner = _model_of(args[1])
        return (inner[0], f".{NAME}{inner[1]}") if inner else None
    if origin in (list, tuple) and args:
        inner = _model_of(args[0])
        return (inner[0], f"[]{inner[1]}") if inner else None
    return None


def type_name(annotation: Any) -> str:
    """A field's type as a kit's author writes it (TOML's words)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if origin is Annotated:
        for meta in args[1:]:
            if isinstance(meta, WithJsonSchema) and meta.json_schema:
                return str(meta.json_schema.get("type", "string"))
        return type_name(args[0])
    if origin is Literal:
        return " or ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in args if a is not type(None))
    if origin in (list, tuple):
        return f"array of {type_name(args[0])}" if args else "array"
    if origin is dict:
        return f"table of {type_name(args[1])}" if args else "table"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " or ".join(f'"{m.value}"' for m in annotation)
    return getattr(annotation, "__name__", str(annotation))


def _annotated(field: FieldInfo) -> Any:
    """The field's type with its validators and serializers (pydantic keeps them apart)."""
    if not field.metadata:
        return field.annotation
    return Annotated[(field.annotation, *field.metadata)]


def default_text(field: FieldInfo) -> str:
    """A field's default as it would be written in a kit; `required`, or `unset` for None."""
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    dumped = TypeAdapter(_annotated(field)).dump_python(value, mode="json")
    return _toml(dumped)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value)


def model_tables(root: type[BaseModel]) -> Iterator[tuple[str, type[BaseModel], str]]:
    """(dotted table name, its model, what holds it) for `root` and every table under it,
    depth first, in the models' field order."""

    def walk(prefix: str, model: type[BaseModel], note: str) -> Iterator[Any]:
        yield prefix, model, note
        for name, field in model.model_fields.items():
            held = _model_of(field.annotation)
            if held is not None:
                yield from walk(f"{prefix}.{name}{held[1]}".lstrip("."), held[0], name)

    yield from walk("", root, "")


def kit_tables() -> Iterator[tuple[str, type[BaseModel], str]]:
    """`model_tables` of the kit."""
    from stallkit.kits.kit import Kit

    yield from model_tables(Kit)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def key_tables(root: type[BaseModel]) -> list[str]:
    """One markdown table of keys (type, default, description) per TOML table of `root`."""
    lines: list[str] = []
    for table, model, _ in model_tables(root):
        rows = [
            (name, field)
            for name, field in model.model_fields.items()
            if _model_of(field.annotation) is None
        ]
        if not rows:
            continue
        doc = " ".join((model.__doc__ or "").split("\n\n")[0].split())
        heading = f"`[{table}]`" if table else "Top level"
        lines += ["", f"## {heading}", ""]
        if doc and table:
            lines += [doc, ""]
        lines += ["| key | type | default | description |", "| --- | --- | --- | --- |"]
        for name, field in rows:
            key = f"{table}.{name}" if table else name
            lines.append(
                f"| `{key}` | {_cell(type_name(_annotated(field)))} | "
                f"`{_cell(default_text(field))}` | {_cell(field.description or '')} |"
            )
    return lines


def kit_reference() -> str:
    """The kit reference page."""
    from stallkit.kits.kit import Kit

    lines = [
        "# Kit reference",
        "",
        "<!-- generated by docs/gen_reference.py from the kit's models; do not edit -->",
        "",
        "Every key a kit may set, table by table, with its type, its default and what it does.",
        "A kit is a TOML file; unknown keys are refused with their name and line. "
        f"`{NAME}` stands for an arm's name (`base`, `fix`, `run`, or a sweep's arm), "
        "and `[]` for each element of an array of tables. Durations are engine seconds "
        "unless a key says otherwise. The same model, as a JSON Schema: "
        "[kit.schema.json](../schema/kit.schema.json).",
    ]
    return "\n".join(lines + key_tables(Kit)) + "\n"


def case_reference() -> str:
    """The corpus case reference page."""
    from stallkit.contract.corpus import CaseFile

    lines = [
        "# Corpus case reference",
        "",
        "<!-- generated by docs/gen_reference.py from the case's model; do not edit -->",
        "",
        "Every key a corpus case's TOML file may set (`kit corpus show PATH`, `kit corpus run "
        "PATH` or `--cases DIR`), with its type, its default and what it does. Unknown keys "
        "are refused. A kit or overlay path is relative to the case file's folder. The same "
        "model, as a JSON Schema: [case.schema.json](../schema/case.schema.json).",
    ]
    return "\n".join(lines + key_tables(CaseFile)) + "\n"


def _click_context(command: Any, name: str, parent: Any) -> Any:
    click: Any = getattr(typer.core, "_click", None) or importlib.import_module("click")
    return click.Context(
        command,
        info_name=name,
        parent=parent,
        terminal_width=HELP_WIDTH,
        max_content_width=HELP_WIDTH,
    )


def commands() -> Iterator[tuple[str, str]]:
    """(command path, its help page) for `kit` and every command and group under it."""
    from stallkit.kits.cli import app

    def walk(command: Any, ctx: Any) -> Iterator[tuple[str, str]]:
        yield ctx.command_path, command.get_help(ctx)
        if isinstance(command, typer.core.TyperGroup):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                yield from walk(sub, _click_context(sub, name, ctx))

    root = typer.main.get_command(app)
    yield from walk(root, _click_context(root, "kit", None))


def cli_reference() -> str:
    """The command-line reference page."""
    pages = list(commands())
    lines = [
        "# Command reference",
        "",
        "<!-- generated by docs/gen_reference.py from the command line; do not edit -->",
        "",
        "Every `kit` command's `--help` (`-h` too), as the command prints it. Bad input to any "
        "of them is one red `error:` line with a hint and exit code 2.",
        "",
    ]
    lines += [f"- [`{path}`](#{path.replace(' ', '-')})" for path, _ in pages]
    for path, text in pages:
        lines += ["", f"## `{path}`", "", "```text", text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def pages() -> dict[Path, str]:
    """Each generated file and what it should hold."""
    return {
        REFERENCE / "kit.md": kit_reference(),
        REFERENCE / "corpus-case.md": case_reference(),
        REFERENCE / "cli.md": cli_reference(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a committed page is stale"
    )
    args = parser.parse_args(argv)
    stale = []
    for path, text in pages().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(path.name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(REFERENCE.parent.parent)}")
    if stale:
        print(
            f"stale: docs/reference/{', docs/reference/'.join(stale)}; "
            "run `python docs/gen_reference.py` and commit the result",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
