"""The generated reference pages: current with the code, and complete.

`docs/reference/kit.md` and `docs/reference/cli.md` are written by `docs/gen_reference.py` and
committed; a change to a kit model or a command that is not followed by the generator fails
here. Completeness is checked from other sources than the generator's own walk: every kit key
from the kit's JSON Schema, every command from the command tree as `--help` lists it. The
README's links into the repository must resolve too.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from stallkit.kits.cli import app
from stallkit.kits.kit import Kit

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "reference"


def test_committed_reference_is_current() -> None:
    done = subprocess.run(
        [sys.executable, "docs/gen_reference.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stderr


def _schema_keys(node: dict[str, Any], defs: dict[str, Any], prefix: str) -> Iterator[str]:
    """Every leaf key under a JSON Schema node: `<name>` for a table keyed by name, `[]` for
    an array of tables."""
    if "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    for option in node.get("anyOf", []):
        if option.get("type") != "null":
            yield from _schema_keys(option, defs, prefix)
    if "properties" in node:
        for name, sub in node["properties"].items():
            key = f"{prefix}.{name}".lstrip(".")
            inner = list(_schema_keys(sub, defs, key))
            yield from inner or [key]
        return
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        yield from _schema_keys(extra, defs, f"{prefix}.<name>")
    items = node.get("items")
    if isinstance(items, dict):
        yield from _schema_keys(items, defs, f"{prefix}[]")


def test_every_kit_key_is_in_the_reference() -> None:
    schema = Kit.model_json_schema()
    keys = set(_schema_keys(schema, schema.get("$defs", {}), ""))
    # tables of scalars (`engine.env.<name>`) are documented as the table itself
    keys = {re.sub(r"\.<name>$", "", key) for key in keys}
    assert {"load.agents", "sim.engine.cost.step_overhead_s", "slo.ttft"} <= keys
    assert "engine.arm_hosts.<name>.docker_host" in keys
    page = (REFERENCE / "kit.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([^`]+)` \|", page, flags=re.MULTILINE))
    assert keys - documented == set()
    assert documented - keys == set()


def _commands(group: str = "") -> Iterator[str]:
    """Every command path, read from the help pages' command lists as a user would."""
    args = [*group.split(), "--help"]
    result = CliRunner().invoke(app, args, prog_name="kit", terminal_width=200)
    assert result.exit_code == 0, result.output
    section = result.output.partition("Commands:")[2]
    for line in section.splitlines():
        match = re.match(r"^  (\S+)\s", line)
        if match:
            path = f"{group} {match.group(1)}".strip()
            yield path
            yield from _commands(path) if _is_group(path) else ()


def _is_group(path: str) -> bool:
    command: Any = typer.main.get_command(app)
    ctx = typer.Context(command)
    for name in path.split():
        command = command.get_command(ctx, name)
    return isinstance(command, typer.core.TyperGroup)


def test_every_command_is_in_the_reference() -> None:
    found = set(_commands())
    assert {"ab", "run", "corpus run", "engine release build", "engine llamacpp build"} <= found
    page = (REFERENCE / "cli.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^## `kit ?([^`]*)`", page, flags=re.MULTILINE))
    assert found | {""} == headings


def test_readme_links_resolve() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert local, "the README links to its docs"
    missing = [link for link in local if not (REPO / link).exists()]
    assert missing == []
