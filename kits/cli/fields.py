"""Command-line options declared by the config fields they set, so each text is written once.

A flag that mirrors a field of a role's config model takes the field's description as its help
and the field's default as its own. A `kit run`/`kit ab` override takes the description too,
but defaults to "the kit's value". A description may say what leaving the field unset does
(`...; unset: run until stopped.`); a flag that is never unset (it has a default of its own, or
unset keeps the kit's value) shows the description without that clause, so its help never
claims a default the command does not use. A field's flag name, metavar and any note are
declared on the field too (`stallkit.contract.flags.Flag`): `field_option` takes them, and
`kit_overrides` makes the kit-overriding flags of `kit run`, `kit ab` and `kit sweep` from them.
Only a command's own module imports these (and the models), never `kit --help`.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar, get_args, get_type_hints

import typer
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from stallkit.contract.flags import flag_of

P = ParamSpec("P")
R = TypeVar("R")

#: the clause of a description that says what an unset field does: `; unset: never`
_UNSET_RE = re.compile(r";\s*unset:[^.;]*")


def field_help(model: type[BaseModel], name: str, note: str = "", *, unset: bool = True) -> str:
    """The field's description, with a note on how the flag differs (e.g. `0: never`);
    `unset=False` (a flag that always has a value) drops what the description says of unset."""
    description = model.model_fields[name].description
    if not description:
        raise ValueError(f"{model.__name__}.{name} has no description to show as help")
    if not unset:
        description = _UNSET_RE.sub("", description)
    return f"{description} {note}".strip()


def field_default(model: type[BaseModel], name: str) -> Any:
    """The field's default (a field without one cannot give a flag its default)."""
    default = model.model_fields[name].default
    if default is PydanticUndefined:
        raise ValueError(f"{model.__name__}.{name} has no default to give its flag")
    return default


def field_option(
    model: type[BaseModel], name: str, *decls: str, note: str = "", metavar: str | None = None
) -> Any:
    """A typer option (as a parameter's default) whose default and help are the field's; its
    names: `decls`, else the flag the field declares (`stallkit.contract.flags`), else the
    parameter's; its metavar: `metavar`, else the flag's, else its type's
    (`stallkit.kits.cli.helpformat`)."""
    default = field_default(model, name)
    text = field_help(model, name, note, unset=default is None)
    flag = flag_of(model, name)
    if flag is not None:
        # a switch off by default is only switched on (`--x`, not `--x/--no-x`)
        decls = decls or (flag.name.split("/")[0] if default is False else flag.name,)
        metavar = metavar or flag.metavar
    return typer.Option(default, *decls, help=text, metavar=metavar)


def override_help(model: type[BaseModel], name: str, key: str) -> str:
    """Help of a flag that overrides kit field `key` (e.g. `load.seed`); unset keeps the kit's."""
    text = field_help(model, name, unset=False).rstrip(".")
    return f"Override the kit's {key}: {text}. Default: the kit's."  # flags_by_override reads it


def kit_overrides(*keys: str) -> Callable[[Callable[P, R]], Callable[..., R]]:
    """Give a command one option per kit key (`load.agents`), each the flag its field declares
    (name, type and help, `override_help`), in place of its `overrides` parameter: the command
    is called with `overrides`, kit key -> value, of the flags given."""
    options = [(key, *_override_option(key)) for key in keys]

    def decorate(func: Callable[P, R]) -> Callable[..., R]:
        hints = get_type_hints(func, include_extras=True)  # typer reads them off the wrapper
        declared = inspect.signature(func).parameters.values()
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in declared]
        at = next(i for i, p in enumerate(params) if p.name == "overrides")
        kind = params[at].kind
        made = [inspect.Parameter(n, kind, default=o, annotation=t) for _, n, t, o in options]
        params[at : at + 1] = made

        @functools.wraps(func)
        def command(*args: Any, **kwargs: Any) -> R:
            given = {key: kwargs.pop(name) for key, name, _, _ in options}
            overrides = {key: value for key, value in given.items() if value is not None}
            return func(*args, **kwargs, overrides=overrides)  # type: ignore[arg-type]

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


#: a command's `overrides` when none is given (the default of its parameter)
NO_OVERRIDES: Mapping[str, Any] = MappingProxyType({})


def _override_option(key: str) -> tuple[str, Any, Any]:
    """(parameter name, type, typer option) of the flag that overrides kit key `key`."""
    from stallkit.kits.kit import Kit

    *sections, name = key.split(".")
    model: type[BaseModel] = Kit
    for section in sections:
        model = model.model_fields[section].annotation  # type: ignore[assignment]
    flag = flag_of(model, name)
    if flag is None:
        raise ValueError(f"{model.__name__}.{name} declares no flag to override {key} with")
    text = override_help(model, name, key) + (f" {flag.note}" if flag.note else "")
    kind = _without_none(model.model_fields[name].annotation)
    option = typer.Option(None, flag.name, help=text, metavar=flag.metavar)
    return flag.param_name, kind | None, option


def _without_none(annotation: Any) -> Any:
    """`int` of `int | None`."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    return args[0] if len(args) == 1 else annotation


_OVERRIDE_RE = re.compile(r"^Override the kit's ([\w.]+): ")


def _command_flags(ctx: typer.Context) -> list[tuple[str, str]]:
    """(long flag, help) of each option of the command `ctx` runs."""
    found = []
    for param in ctx.command.params:
        text = getattr(param, "help", None)
        longs = [opt for opt in param.opts if opt.startswith("--")]
        if text and longs:
            found.append((longs[0], text))
    return found


def flags_by_field(ctx: typer.Context, model: type[BaseModel]) -> dict[str, str]:
    """The flags of the command `ctx` runs by the `model` field each sets, read from their help.

    A flag declared with `field_option` or `field_help` shows its field's description as its
    help, so the command's own options say which field each one sets: a bad value is blamed on
    its flag without a second list of flag names to keep in step with the options.
    """
    described = [  # a flag shows its field's description with or without its `unset:` clause
        (name, shown)
        for name, field in model.model_fields.items()
        if field.description
        for shown in {field.description, _UNSET_RE.sub("", field.description)}
    ]
    flags: dict[str, str] = {}
    for flag, text in _command_flags(ctx):
        fits = [(n, d) for n, d in described if text == d or text.startswith(d + " ")]
        if fits:  # the longest description that fits: the field, not one whose text it extends
            flags[max(fits, key=lambda fit: len(fit[1]))[0]] = flag
    return flags


def flags_by_override(ctx: typer.Context) -> dict[str, str]:
    """The flags of the command `ctx` runs by the kit key each overrides (`override_help`)."""
    flags = {}
    for flag, text in _command_flags(ctx):
        match = _OVERRIDE_RE.match(text)
        if match:
            flags[match.group(1)] = flag
    return flags
