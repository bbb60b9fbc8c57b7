"""One arm pipeline: a virtual and an HTTP arm of the same kit and seed write the same files.

Both drivers hand their turns and monitor events to the one arm recorder, so the directories
they write differ only in what the engine did: the same files, the same keys in each JSON file,
the same keys per timeline line kind and per turn record. A short simulator arm each way (the
HTTP one served by `kit sim serve` at the kit's time scale, about ten wall seconds).
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from stallkit.engine import parse_spec
from stallkit.kits.ab.plan import Plan
from stallkit.kits.arm.virtual import run_virtual_arm
from stallkit.kits.arm.wall import RunContext, WallArm, run_arm

pytestmark = pytest.mark.slow

OVERRIDES: dict[str, Any] = {"load.duration_s": 300, "load.agents": 4, "load.seed": 8}
#: the served simulator's settings file, its launcher's input (a virtual arm builds its core in
#: process from the same `sim` section, which both arms' kit.json records)
LAUNCHER_INPUT = "sim-config.toml"


def _keys(value: Any) -> Any:
    """The shape of a JSON value: objects by their keys (nested), lists by their first item."""
    if isinstance(value, dict):
        return {key: _keys(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [_keys(value[0])] if value else []
    return type(value).__name__ if value is not None else None


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _structure(arm_dir: Path) -> dict[str, Any]:
    files = sorted(
        str(p.relative_to(arm_dir))
        for p in arm_dir.rglob("*")
        if p.is_file() and p.name != LAUNCHER_INPUT
    )
    out: dict[str, Any] = {"files": files}
    for name in ("kit.json", "meta.json", "summary.json"):
        out[name] = set(json.loads((arm_dir / name).read_text()))
    out["timeline kinds"] = {
        (line["type"], tuple(sorted(line))) for line in _lines(arm_dir / "timeline.jsonl")
    }
    out["turn keys"] = {tuple(sorted(turn)) for turn in _lines(arm_dir / "turns.jsonl")}
    return out


def _wall_arm(out: Path) -> Path:
    plan = Plan.build("restore-stall", {"fix": "sim:fix"}, out, OVERRIDES, [], clock="wall")
    (planned,) = plan.arms
    arm = WallArm(planned.name, planned.spec, planned.dir, plan.kit)
    console = Console(file=io.StringIO(), width=100)
    run = RunContext()
    try:
        asyncio.run(run_arm(arm, run, console, dashboard=False))
    finally:
        for launcher in run.launchers:
            launcher.stop()
    return arm.dir


@pytest.mark.wallclock
def test_a_virtual_and_an_http_arm_write_the_same_files_through_one_recorder(
    tmp_path: Path,
) -> None:
    plan = Plan.build(
        "restore-stall", {"fix": "sim:fix"}, tmp_path / "virtual", OVERRIDES, [], clock="virtual"
    )
    virtual = run_virtual_arm(plan.kit, "fix", parse_spec("sim:fix"), tmp_path / "virtual")
    assert virtual.end_reason == "duration"
    wall_dir = _wall_arm(tmp_path / "wall")
    got = {"virtual": _structure(tmp_path / "virtual"), "wall": _structure(wall_dir)}
    assert got["virtual"] == got["wall"]
    assert {kind for kind, _ in got["virtual"]["timeline kinds"]} == {"sample", "gpu"}
    assert got["virtual"]["turn keys"], "no turn finished"
    # each file's nested shape too (the kit as the arm ran it, the summary's figures)
    for name in ("kit.json", "summary.json"):
        shapes = [
            _keys(json.loads((d / name).read_text())) for d in (tmp_path / "virtual", wall_dir)
        ]
        assert shapes[0] == shapes[1], name
    meta = {d: json.loads((p / "meta.json").read_text()) for d, p in
            (("virtual", tmp_path / "virtual"), ("wall", wall_dir))}  # fmt: skip
    assert (meta["virtual"]["clock"], meta["wall"]["clock"]) == ("virtual", "wall")
    # wall_s is wall seconds on both clocks: a virtual arm's is the time it took to compute
    assert meta["virtual"]["engine_s"] >= 300 > 30 > meta["virtual"]["wall_s"] > 0
    assert meta["virtual"]["wall_s"] == meta["virtual"]["compute_wall_s"]
    assert meta["wall"]["wall_s"] == pytest.approx(meta["wall"]["engine_s"] / 30, rel=0.5)
