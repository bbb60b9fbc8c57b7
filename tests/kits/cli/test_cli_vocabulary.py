"""One vocabulary of flags over every `kit` command, walked through click's command tree: a long
name always has the same short name and the same kind (a flag, or an option taking a value),
a short name always stands for the same long name, `--out` is always `-o` and `--kit` always
`-k`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import typer

from stallkit.kits.cli import app


def _commands() -> Iterator[tuple[str, Any]]:
    """(`kit sub cmd`, the command) for every command and group below `kit`."""
    root = typer.main.get_command(app)

    def walk(command: Any, path: str, ctx: Any) -> Iterator[tuple[str, Any]]:
        yield path, command
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    yield from walk(sub, f"{path} {name}", sub.context_class(sub, parent=ctx))

    yield from walk(root, "kit", root.context_class(root))


def _options() -> list[tuple[str, str, str | None, str]]:
    """(command, long name, short name, kind) of every option of every command."""
    found = []
    for path, command in _commands():
        for param in command.params:
            if param.param_type_name != "option" or param.hidden:
                continue
            longs = [o for o in param.opts if o.startswith("--")]
            shorts = [o for o in param.opts if not o.startswith("--")]
            kind = "flag" if param.is_flag or param.count else "value"
            for long in longs:
                found.append((path, long, shorts[0] if shorts else None, kind))
    return found


def test_every_command_is_walked() -> None:
    paths = {path for path, _ in _commands()}
    for expected in ("kit ab", "kit monitor", "kit trace generate", "kit corpus run",
                     "kit engine release build", "kit sim serve"):  # fmt: skip
        assert expected in paths, sorted(paths)


def test_a_long_name_has_one_short_name_and_one_kind_everywhere() -> None:
    shorts: dict[str, dict[str | None, list[str]]] = defaultdict(lambda: defaultdict(list))
    kinds: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    longs_of: dict[str, set[str]] = defaultdict(set)
    for path, long, short, kind in _options():
        shorts[long][short].append(path)
        kinds[long][kind].append(path)
        if short is not None:
            longs_of[short].add(long)
    mixed = {long: dict(by) for long, by in shorts.items() if len(by) > 1 and long != "--help"}
    assert not mixed, mixed
    assert not {long: dict(by) for long, by in kinds.items() if len(by) > 1}
    assert not {short: longs for short, longs in longs_of.items() if len(longs) > 1}


def test_out_is_always_o_and_kit_always_k() -> None:
    options = _options()
    for long, short in (("--out", "-o"), ("--kit", "-k")):
        uses = [(path, s) for path, name, s, _ in options if name == long]
        assert len(uses) >= 5, uses
        assert all(s == short for _, s in uses), [u for u in uses if u[1] != short]


def test_a_kit_setting_has_one_override_flag_declared_by_its_field() -> None:
    from stallkit.contract.flags import flag_of
    from stallkit.kits.cli.run import OVERRIDES
    from stallkit.kits.kit import Kit

    helps: dict[str, dict[str, str]] = defaultdict(dict)
    for path, command in _commands():
        for param in command.params:
            for long in (o for o in param.opts if o.startswith("--")):
                helps[path][long] = getattr(param, "help", "") or ""
    for key in OVERRIDES:
        section, name = key.split(".")
        flag = flag_of(Kit.model_fields[section].annotation, name)  # type: ignore[arg-type]
        assert flag is not None, key
        long = flag.name.split("/")[0]
        texts = {helps[path][long] for path in ("kit run", "kit ab")}
        assert len(texts) == 1 and next(iter(texts)).startswith(f"Override the kit's {key}: ")
    assert helps["kit sweep"]["--duration"] == helps["kit ab"]["--duration"]
    # `kit load` sets the same fields with the same flags, its default being the field's
    assert helps["kit load"]["--agents"].startswith("Concurrent agents")
