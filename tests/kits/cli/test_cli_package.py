"""The command line as its own package: `kit --help` imports no role, each command loads lazily.

The help is checked in a fresh `kit` process (the modules it holds at exit are the proof),
and the top-level list of commands is checked against what the command modules register.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from stallkit.kits.cli import app
from stallkit.kits.cli.commands import COMMANDS
from tests.support import kit, one_error_line

REPO = Path(__file__).resolve().parents[3]

#: nothing `kit --help` needs: the roles, their config models, the HTTP client, live views, plots
HEAVY = ("httpx", "rich.live", "numpy", "matplotlib", "plotly", "vllm", "torch", "uvicorn")
ROLES = ("stallkit.engine", "stallkit.loadgen", "stallkit.monitor", "stallkit.reports")


#: `python -m stallkit ARGS`, then the names of every module the process holds, on stderr
_PROBE = """
import json, runpy, sys
sys.argv[0] = "kit"
try:
    runpy.run_module("stallkit", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _imported_by(*args: str) -> set[str]:
    """The modules `kit ARGS` has imported by the time it exits."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert "Usage: kit" in done.stdout, done.stderr
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def _under(modules: set[str], roots: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == r or m.startswith(f"{r}.") for r in roots)}


def test_kit_help_imports_no_role_and_no_heavy_module() -> None:
    modules = _imported_by("--help")
    assert _under(modules, HEAVY + ROLES) == set()
    assert {m for m in modules if m.startswith("stallkit.kits.")} <= {
        "stallkit.kits.cli",
        "stallkit.kits.cli.common",
        "stallkit.kits.cli.commands",
        "stallkit.kits.cli.helpformat",
    }
    assert not {"pydantic", "pydantic_core"} & modules  # no config model, not even the errors
    # the probe does see what a command's own help loads: its flags come from the models
    assert {"stallkit.loadgen.config", "stallkit.kits.cli.load"} <= _imported_by("load", "--help")


def test_the_command_list_is_what_the_modules_register() -> None:
    registered: dict[str, str] = {}
    for module in sorted({module for module, _ in COMMANDS.values()}):
        family = typer.Typer()
        __import__(f"stallkit.kits.cli.{module}", fromlist=["register"]).register(family)
        registered |= dict.fromkeys(typer.main.get_group(family).commands, module)
    assert registered == {name: module for name, (module, _) in COMMANDS.items()}
    group = typer.main.get_command(app)
    with typer.Context(group) as ctx:
        assert group.list_commands(ctx) == list(COMMANDS)  # type: ignore[attr-defined]


#: the trace's window and salt, as AIPerf names the window's flags
TRACE_WINDOW_FLAGS = [
    ("--fixed-schedule-auto-offset", "trace_auto_offset"),
    ("--fixed-schedule-start-offset", "trace_start_offset_ms"),
    ("--fixed-schedule-end-offset", "trace_end_offset_ms"),
    ("--trace-salt", "trace_salt"),
]
#: command -> (flag, model, field, whether the flag's default is the field's or None: the kit's)
DERIVED = {
    "load": [
        ("--model", "stallkit.loadgen.config:LoadConfig", "model", True),
        ("--agents", "stallkit.loadgen.config:LoadConfig", "agents", True),
        ("--min-context", "stallkit.loadgen.config:LoadConfig", "min_context", True),
        ("--max-context", "stallkit.loadgen.config:LoadConfig", "max_context", True),
        ("--read-timeout", "stallkit.loadgen.config:LoadConfig", "read_timeout_s", True),
        ("--duration", "stallkit.loadgen.config:LoadConfig", "duration_s", True),
        ("--max-turns", "stallkit.loadgen.config:LoadConfig", "max_turns", True),
        ("--seed", "stallkit.loadgen.config:LoadConfig", "seed", True),
        ("--api-key-env", "stallkit.loadgen.config:LoadConfig", "api_key_env", True),
        ("--tokenizer", "stallkit.loadgen.config:LoadConfig", "tokenizer", True),
        ("--trace", "stallkit.loadgen.config:LoadConfig", "trace", True),
        ("--block-size", "stallkit.loadgen.config:LoadConfig", "trace_block_tokens", True),
        *(
            (flag, "stallkit.loadgen.config:LoadConfig", name, True)
            for flag, name in TRACE_WINDOW_FLAGS
        ),
    ],
    "monitor": [
        ("--interval", "stallkit.monitor.config:MonitorConfig", "interval_s", True),
        ("--stall-after", "stallkit.monitor.config:MonitorConfig", "stall_after_s", True),
        ("--stop-after", "stallkit.monitor.config:MonitorConfig", "stop_after_s", True),
        ("--idle-gpu", "stallkit.monitor.config:MonitorConfig", "idle_gpu_perc", True),
        ("--gpu-window", "stallkit.monitor.config:MonitorConfig", "gpu_window_s", True),
    ],
    "rules": [
        (
            "--stall-after",
            "stallkit.monitor.prometheus.rules:RulesSettings",
            "stall_after_s",
            False,
        ),
        ("--idle-gpu", "stallkit.monitor.prometheus.rules:RulesSettings", "idle_gpu_perc", False),
        ("--down-after", "stallkit.monitor.prometheus.rules:RulesSettings", "down_after_s", True),
        (
            "--scrape-interval",
            "stallkit.monitor.prometheus.rules:RulesSettings",
            "scrape_interval_s",
            True,
        ),
        (
            "--eval-interval",
            "stallkit.monitor.prometheus.rules:RulesSettings",
            "evaluation_interval_s",
            True,
        ),
        (
            "--engine-selector",
            "stallkit.monitor.prometheus.rules:RulesSettings",
            "engine_selector",
            True,
        ),
        ("--gpu-selector", "stallkit.monitor.prometheus.rules:RulesSettings", "gpu_selector", True),
        (
            "--gpu-match",
            "stallkit.monitor.prometheus.rules:RulesSettings",
            "gpu_match_labels",
            True,
        ),
    ],
    **{
        command: [
            ("--seed", "stallkit.loadgen.config:LoadConfig", "seed", False),
            ("--agents", "stallkit.loadgen.config:LoadConfig", "agents", False),
            ("--min-context", "stallkit.loadgen.config:LoadConfig", "min_context", False),
            ("--max-context", "stallkit.loadgen.config:LoadConfig", "max_context", False),
            ("--duration", "stallkit.loadgen.config:LoadConfig", "duration_s", False),
            ("--time-scale", "stallkit.kits.kit:SimSection", "time_scale", False),
            ("--trace", "stallkit.loadgen.config:LoadConfig", "trace", False),
            *(
                (flag, "stallkit.loadgen.config:LoadConfig", name, False)
                for flag, name in TRACE_WINDOW_FLAGS
            ),
        ]
        for command in ("run", "ab")
    },
}


def _words(text: str) -> str:
    """The text without its white space (help is wrapped at spaces and after hyphens)."""
    return "".join(text.split())


@pytest.mark.parametrize("command", sorted(DERIVED))
def test_flags_take_help_and_default_from_their_config_field(command: str) -> None:
    import importlib

    from stallkit.kits.cli.fields import field_help

    group = typer.main.get_command(app)
    with typer.Context(group) as ctx:
        cli_command = group.get_command(ctx, command)  # type: ignore[attr-defined]
    shown = _words(CliRunner().invoke(app, [command, "--help"], terminal_width=100).output)
    by_flag = {opt: p for p in cli_command.params for opt in p.opts}
    for flag, where, name, own_default in DERIVED[command]:
        module, model = where.split(":")
        cls = getattr(importlib.import_module(module), model)
        field = cls.model_fields[name]
        # what unset means is said only by a flag that can be unset: its default is the field's
        # None (an override unset keeps the kit's value, which it says instead)
        text = field_help(cls, name, unset=own_default and field.default is None)
        assert field.description and _words(text) in _words(by_flag[flag].help)
        assert _words(text) in shown, (flag, shown)
        assert by_flag[flag].default == (field.default if own_default else None), flag


@pytest.mark.parametrize("command", sorted(DERIVED))
def test_a_bad_value_is_blamed_on_the_flag_its_field_declared(command: str) -> None:
    """The field -> flag maps that blame a bad value are read from the command's own options."""
    import importlib

    from stallkit.kits.cli.fields import flags_by_field, flags_by_override

    group = typer.main.get_command(app)
    with typer.Context(group) as ctx:
        cli_command = group.get_command(ctx, command)  # type: ignore[attr-defined]
    command_ctx = typer.Context(cli_command)
    if command in ("run", "ab"):
        sections = {"LoadConfig": "load", "SimSection": "sim"}
        expected = {
            f"{sections[model.split(':')[1]]}.{name}": flag
            for flag, model, name, _ in DERIVED[command]
        }
        assert flags_by_override(command_ctx) == expected
        return
    for flag, model, name, _ in DERIVED[command]:
        module, cls = model.split(":")
        blamed = flags_by_field(command_ctx, getattr(importlib.import_module(module), cls))
        assert blamed[name] == flag, (name, blamed)


@pytest.mark.parametrize(
    ("args", "says", "where"),
    [
        (["ab", "--bogus"], "No such option: --bogus", "kit ab"),
        (["run"], "Missing option '--engine'", "kit run"),
        (["run", "--engine", "sim:base", "--duration", "abc"], "'--duration'", "kit run"),
        (["load", "http://x:1", "--metrics-port", "70000"], "No such option", "kit load"),
        (["sim", "trace", "--steps", "0"], "'--steps'", "kit sim trace"),
        (["nosuch"], "No such command 'nosuch'", "kit"),
    ],
)
def test_a_command_line_the_parser_refuses_is_one_line_too(
    args: list[str], says: str, where: str
) -> None:
    """Not the parser's usage block: the red line every other mistake gets, with its hint."""
    line = one_error_line(kit(*args))
    assert says in line and line.endswith(f"(hint: see `{where} --help`)"), line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["monitor", "http://127.0.0.1:9", "--interval", "-1"], "--interval: "),
        (["monitor", "http://127.0.0.1:9", "--stall-after", "60", "--stop-after", "30"],
         "--stop-after (30) must be >= --stall-after (60)"),
        (["load", "http://127.0.0.1:9", "--read-timeout", "-1"], "--read-timeout: "),
        (["load", "http://127.0.0.1:9", "--min-context", "5000", "--max-context", "100"],
         "--min-context (5000) must not exceed --max-context (100)"),
        (["rules", "--down-after", "-1"], "--down-after: "),
        (["ab", "--time-scale", "0", "--dry-run"], "--time-scale: "),
    ],
)  # fmt: skip
def test_bad_values_are_one_line_naming_the_flag_not_the_field(args: list[str], says: str) -> None:
    line = one_error_line(kit(*args))
    assert says in line, line
    assert not re.search(r"\b[a-z]+_(s|perc|context)\b", line), line  # no field name shows


#: the two names of the one command line that serves the simulator
SERVE = {
    "kit sim serve": ["-m", "stallkit", "sim", "serve"],
    "python -m stallkit.engine.serve": ["-m", "stallkit.engine.serve"],
}


def _serve_both(*args: str) -> dict[str, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "COLUMNS": "100"}
    return {
        prog: subprocess.run(
            [sys.executable, *argv, *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=60,
        )
        for prog, argv in SERVE.items()
    }


def test_kit_sim_serve_and_python_m_engine_sim_take_the_same_flags() -> None:
    """One set of flags, each helped by its `ServeOptions` field, in two front ends: the kit's
    (typer, in the help style of every `kit` command) and the engine's own (argparse: images
    run it without the kit). A bad value is one line naming the flag, exit 2, in both."""
    from stallkit.engine.serve.options import ServeOptions

    helps = _serve_both("--help")
    flags = {
        prog: set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", done.stdout))
        for prog, done in helps.items()
    }
    assert flags["kit sim serve"] == flags["python -m stallkit.engine.serve"], flags
    assert {"--port", "--time-scale", "--freeze-at", "--core", "--fault"} <= flags["kit sim serve"]
    for prog, done in helps.items():
        assert done.returncode == 0, done.stderr
        for name, field in ServeOptions.model_fields.items():
            if name != "config":  # the --config file, not a flag per field
                assert _words(field.description or "?") in _words(done.stdout), (prog, name)
    assert helps["kit sim serve"].stdout.startswith("Usage: kit sim serve [OPTIONS]")
    for bad in (["--port", "x"], ["--time-scale", "-1"], ["--nosuch"]):
        for prog, done in _serve_both(*bad).items():
            assert done.returncode == 2 and done.stdout == "", (prog, done)
            line = done.stderr
            assert len(line.splitlines()) == 1 and line.startswith("error: "), line
            assert bad[0] in line and f"(hint: see `{prog} --help`)" in line, line


def test_an_unexpected_error_escapes_as_itself_and_abort_says_aborted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bug's own traceback, not the group's (it looked up click's Abort where typer's copy of
    click has none, and raised AttributeError over every unexpected error)."""
    from stallkit.kits.cli.commands import LazyGroup

    app = typer.Typer(cls=LazyGroup)

    @app.command()
    def boom() -> None:
        raise RuntimeError("a bug")

    @app.command()
    def abort() -> None:
        raise typer.Abort()

    group = typer.main.get_command(app)
    with pytest.raises(RuntimeError, match="a bug"):
        group.main(["boom"], prog_name="kit")
    with pytest.raises(SystemExit) as done:
        group.main(["abort"], prog_name="kit")
    assert done.value.code == 1 and "Aborted!" in capsys.readouterr().err
