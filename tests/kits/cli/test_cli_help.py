"""Every `kit` help page, rendered at 80 columns: one style, nothing cut, no claim the code breaks.

Each command and subcommand prints its help (exit 0) within the terminal's width, names its
values in one metavar style (upper-case names or `[a|b]` choices, never typer's `<str>`,
`{url}` or `<list[str]>`), and keeps every word of its texts whole on one line, so a spec list
such as `twin:patched:base` is never split. `kit sim serve` is a typer command like the rest,
and `-h` is `--help` everywhere. A flag's help says what the command does when it is not given.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import typer
from typer.testing import CliRunner, Result

from stallkit.kits.cli import app

#: a term's metavar: an upper-case name (`URL`, `NAME|FILE`, `KIND@S`) or a choice (`[a|b]`)
METAVAR = re.compile(
    r"^([A-Z][A-Z0-9_]*([|@][A-Z0-9_]+)*(\.\.\.)?|\[[a-z0-9_-]+(\|[a-z0-9_-]+)+\])$"
)
#: what typer prints when a value has no metavar of its own
TYPER_STYLE = re.compile(r"<(str|int|float|bool|path|list\[|int range|float range)|\{[a-z_]+\}")


def _commands() -> Iterator[list[str]]:
    """The path of every command and group, `[]` for `kit` itself."""
    root = typer.main.get_command(app)

    def walk(
        command: typer.core.TyperCommand | typer.core.TyperGroup, path: list[str]
    ) -> Iterator[list[str]]:
        yield path
        if isinstance(command, typer.core.TyperGroup):
            with typer.Context(command) as ctx:
                for name in command.list_commands(ctx):
                    sub = command.get_command(ctx, name)
                    assert sub is not None, name
                    yield from walk(sub, [*path, name])  # type: ignore[arg-type]

    yield from walk(root, [])  # type: ignore[arg-type]


COMMANDS = list(_commands())


def _help(path: list[str], width: int = 80, flag: str = "--help") -> Result:
    result = CliRunner().invoke(
        app, [*path, flag], env={"COLUMNS": str(width)}, terminal_width=width
    )
    assert result.exit_code == 0, result.output
    return result


def _command(path: list[str]) -> typer.core.TyperCommand:
    command = typer.main.get_command(app)
    for name in path:
        with typer.Context(command) as ctx:
            command = command.get_command(ctx, name)  # type: ignore[attr-defined]
    return command  # type: ignore[return-value]


def _texts(path: list[str]) -> list[str]:
    """The texts a command's help renders: its own and each parameter's."""
    command = _command(path)
    texts = [(command.help or "").partition("\f")[0]]
    return texts + [getattr(p, "help", None) or "" for p in command.params]


def test_every_command_is_walked() -> None:
    names = {" ".join(path) for path in COMMANDS}
    assert {"", "ab", "sim", "sim serve", "sim trace", "engine conformance", "trace stats"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(["kit", *p]))
def test_help_fits_80_columns_in_one_metavar_style(path: list[str]) -> None:
    lines = _help(path).output.splitlines()
    assert lines[0].startswith(f"Usage: {' '.join(['kit', *path])} "), lines[0]
    too_wide = [line for line in lines if len(line) > 80]
    assert too_wide == [], too_wide
    assert not TYPER_STYLE.search("\n".join(lines)), path
    usage = lines[0].split("[OPTIONS]", 1)[-1].replace("COMMAND [ARGS]...", "").split()
    assert all(METAVAR.match(piece.strip("[]")) for piece in usage), lines[0]
    options = lines[lines.index("Options:") + 1 :]
    for line in options[: next((i for i, x in enumerate(options) if not x.startswith(" ")), None)]:
        term = re.match(r"^  (-\S.*?)(?:  |$)", line)  # an option's first column
        if term is not None:  # `-o, --out PATH`, `--json`, `--x / --no-x`: names, then one value
            values = [w for w in term.group(1).split() if not w.startswith(("-", "/"))]
            assert len(values) <= 1 and all(METAVAR.match(v) for v in values), line


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(["kit", *p]))
def test_no_word_is_split_across_lines(path: list[str], width: int) -> None:
    """Every word of a command's texts (a spec, a path, a flag, a JSON default) stays whole on
    one line: help wraps only at spaces, never inside a word or at its hyphens."""
    lines = _help(path, width).output.splitlines()
    assert all(len(line) <= width for line in lines)
    for text in _texts(path):
        for word in text.split():
            assert any(word in line for line in lines), (word, path)


@pytest.mark.parametrize(
    ("path", "words"),
    [
        (
            ["run"],
            ["sim:base", "patched:fix", "twin:stock", "twin:patched:base", "twin:MODULE:CLASS"],
        ),
        (["sweep"], ["base=twin:patched:base,fix=twin:patched:fix"]),
        (["sim", "serve"], ["twin:patched:fix,", "seed-gpu-tp2]"]),
        (["engine", "conformance"], ['{"patched_scheduler":', '"prefill_compute_share":']),
        (["monitor"], ["./kit-runs/<time>-monitor)."]),
    ],
)
def test_spec_lists_and_paths_are_whole_at_80_columns(path: list[str], words: list[str]) -> None:
    output = _help(path).output
    for word in words:
        assert any(word in line for line in output.splitlines()), (word, output)


def test_kit_sim_serve_is_a_command_like_the_others() -> None:
    serve, trace = _help(["sim", "serve"]).output, _help(["sim", "trace"]).output
    for output in (serve, trace):
        assert "\nOptions:\n" in output
        assert re.search(r"^  -h, --help +Show this message and exit\.$", output, re.M)
    assert serve.startswith("Usage: kit sim serve [OPTIONS]\n")
    assert "usage:" not in serve and "options:" not in serve  # not argparse's page
    assert re.search(r"^  --port INTEGER +Port to bind", serve, re.M)
    assert re.search(r"^  --policy \[base\|fix\] ", serve, re.M)
    assert re.search(r"^  --log-level \[debug\|info\|warning\|error\]$", serve, re.M)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(["kit", *p]))
def test_dash_h_is_help_everywhere(path: list[str]) -> None:
    assert _help(path, flag="-h").output == _help(path).output


def _options() -> Iterator[tuple[str, typer.core.TyperOption]]:
    for path in COMMANDS:
        for param in _command(path).params:
            if isinstance(param, typer.core.TyperOption):
                yield " ".join(["kit", *path, param.opts[-1]]), param


def test_only_a_flag_that_can_be_unset_says_what_unset_does() -> None:
    """A flag with a default of its own is never unset; an override left unset keeps the kit's
    value. Neither shows its field's `; unset: ...` clause (`unset: run until stopped` on
    `kit ab --duration`, whose kit always sets a duration)."""
    wrong = [
        where
        for where, option in _options()
        if re.search(r";\s*unset:", option.help or "")
        and (option.default is not None or (option.help or "").startswith("Override the kit's"))
    ]
    assert wrong == [], wrong
    helps = {where: option.help or "" for where, option in _options()}
    assert "; unset: run until stopped." in helps["kit load --duration"]  # `kit load`: it does


def test_a_flag_that_defaults_to_the_kit_does_so() -> None:
    """`kit ab --duration`, `--seed` and `--seeds` say what they do unset; the plan does it."""
    helps = {where: option.help or "" for where, option in _options()}
    assert "Default: the kit's." in helps["kit ab --duration"]
    assert "10 seeds from the kit's seed" in helps["kit ab --seeds"]

    def plan(*args: str) -> str:
        result = CliRunner().invoke(app, ["ab", "--dry-run", *args])
        assert result.exit_code == 0, result.output
        return next(line for line in result.output.splitlines() if line.startswith("load:"))

    assert "5400 engine s, 10 seeds (8-17)" in plan()  # restore-stall: 5400 s from seed 8
    assert "60 engine s, seed 3;" in plan("--duration", "60", "--seed", "3")
    assert "5400 engine s, seed 8;" in plan("--clock", "wall")
