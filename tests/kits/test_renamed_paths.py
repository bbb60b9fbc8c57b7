"""Saved kits and specs that name the plugin by its path before `stallkit.`: one line naming
the new path, exit 2, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest

from stallkit.engine import renamed_plugin_path
from tests.support import kit

OLD = "engine.patched.scheduler.PatchedScheduler"
NEW = "stallkit.engine.vllm_plugin.scheduler.PatchedScheduler"


def test_the_old_path_is_told_apart_from_the_new_one() -> None:
    assert renamed_plugin_path(OLD) == f"{OLD} is now {NEW}"
    assert renamed_plugin_path(f"--scheduler-cls={OLD}") == f"{OLD} is now {NEW}"
    assert renamed_plugin_path("engine.patched.scheduler.AsyncPatchedScheduler") == (
        "engine.patched.scheduler.AsyncPatchedScheduler is now "
        "stallkit.engine.vllm_plugin.scheduler.AsyncPatchedScheduler"
    )
    assert renamed_plugin_path(NEW) is None
    assert renamed_plugin_path("my_fork.sched.FairScheduler") is None


@pytest.mark.parametrize(
    "table", ["engine_args = [{args}]", "arm_engine_args = {{ fix = [{args}] }}"]
)
def test_a_kit_with_the_old_plugin_path_is_refused_in_one_line(table: str, tmp_path: Path) -> None:
    path = tmp_path / "old.toml"
    args = f'"--scheduler-cls", "{OLD}"'
    path.write_text(f'name = "old"\n[engine]\n{table.format(args=args)}\n')
    done = kit("ab", "--kit", str(path), "--dry-run")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{OLD} is now {NEW}" in lines[0], done.stderr


def test_a_twin_spec_with_the_old_plugin_path_names_the_new_form() -> None:
    done = kit("ab", "--base", "twin:engine.patched.scheduler:PatchedScheduler", "--dry-run")
    assert done.returncode == 2
    assert f"{OLD} is now {NEW}" in done.stderr and "twin:patched:base" in done.stderr
    assert "Traceback" not in done.stderr
