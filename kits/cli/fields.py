"""Command-line options declared by the config fields they set, so each text is written once.

A flag that mirrors a field of a role's config model takes the field's description as its help
and the field's default as its own. A `kit run`/`kit ab` override takes the description too,
but defaults to "the kit's value". Only a command's own module imports these (and the models),
never `kit --help`.
"""

from __future__ import annotations

from typing import Any

import typer
from pydantic import BaseModel
from pydantic_core import PydanticUndefined


def field_help(model: type[BaseModel], name: str, note: str = "") -> str:
    """The field's description, with a note on how the flag differs (e.g. `0: never`)."""
    description = model.model_fields[name].description
    if not description:
        raise ValueError(f"{model.__name__}.{name} has no description to show as help")
    return f"{description} {note}".strip()


def field_default(model: type[BaseModel], name: str) -> Any:
    """The field's default (a field without one cannot give a flag its default)."""
    default = model.model_fields[name].default
    if default is PydanticUndefined:
        raise ValueError(f"{model.__name__}.{name} has no default to give its flag")
    return default


def field_option(model: type[BaseModel], name: str, *decls: str, note: str = "") -> Any:
    """A typer option (as a parameter's default) whose default and help are the field's."""
    return typer.Option(field_default(model, name), *decls, help=field_help(model, name, note))


def override_help(model: type[BaseModel], name: str, key: str) -> str:
    """Help of a flag that overrides kit field `key` (e.g. `load.seed`); unset keeps the kit's."""
    return f"Override the kit's {key}: {field_help(model, name)}"
