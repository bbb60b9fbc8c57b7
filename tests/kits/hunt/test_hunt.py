"""`kit hunt`: the search and the shrinker on a made-up space (pure), then one real hunt whose
space holds a single point where base livelocks (seed 8 of the README kit)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stallkit.contract.sweep import SweepAxis, SweepRun
from stallkit.kits.cli import app
from stallkit.kits.errors import KitError
from stallkit.kits.hunt.plan import Point, Search, Space, load_space, shrink


def _run(stalled: bool, quiet_s: float = 0.0) -> SweepRun:
    return SweepRun(
        seed=1, stalled=stalled, kind=None, onset_s=None, stopped_run=False, turns=0,
        preemptions=None, restores_recomputed=None, decode_tok_s=None, duration_s=1.0,
        clock="virtual", like_for_like=True, end_reason="duration", exposure_s=1.0,
        censored=None, cell=0, settings={}, arm="fix", compute_s=0.0, quiet_s=quiet_s,
    )  # fmt: skip


SPACE = Space(
    axes=(SweepAxis(key="a", values=list(range(20))), SweepAxis(key="b", values=list(range(20)))),
    targets=(3, 0),
    seeds=(1, 50),
)


def _stalls(p: Point) -> bool:
    """A region far from the start, stalling for even seeds only."""
    return p.index[0] >= 12 and p.index[1] >= 9 and p.seed % 2 == 0


def test_search_is_reproducible_and_finds_a_region_through_near_misses() -> None:
    def evaluate(points: list[Point]) -> list[list[SweepRun]]:
        # closer to the region, a longer quiet span: the near misses lead the search there
        return [[_run(_stalls(p), quiet_s=float(p.index[0] + p.index[1]))] for p in points]

    def search(seed: int) -> tuple[Point | None, int]:
        s = Search(SPACE, evaluate, lambda runs: runs[0].stalled, 1, random.Random(seed))
        return s.run(400), s.runs

    hit, runs = search(7)
    assert hit is not None and _stalls(hit) and runs <= 400
    assert search(7) == (hit, runs)  # the same seed, the same search


def test_search_spends_its_budget_when_nothing_stalls() -> None:
    s = Search(
        SPACE, lambda ps: [[_run(False)] for _ in ps], lambda r: r[0].stalled, 2, random.Random(1)
    )
    assert s.run(100) is None and s.runs == 100 and len(s.seen) == 50


def test_shrink_moves_each_setting_to_the_edge_of_the_region_then_the_smallest_seed() -> None:
    point, spent = shrink(SPACE, Point((19, 17), 48), _stalls, budget=100, smallest_seeds=16)
    assert point == Point((12, 9), 2)  # a toward its target 3, b toward 0, seed from 1 up
    assert spent < 30
    # within a budget it stops where it got to, still a stalling point
    early, spent = shrink(SPACE, Point((19, 17), 48), _stalls, budget=3, smallest_seeds=16)
    assert spent == 3 and _stalls(early)


def test_space_file_values_targets_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "space.toml"
    path.write_text(
        '[settings]\n"sim.engine.max_num_seqs" = {min = 2, max = 8, step = 2}\n'
        '"load.agents" = [4, 12, 24]\n[seeds]\nmin = 5\nmax = 9\n'
    )
    space = load_space(path, {"sim.engine.max_num_seqs": 4, "load.agents": 12}.get)
    assert space.axes[0].values == [2, 4, 6, 8] and space.seeds == (5, 9)
    assert space.targets == (1, 0)  # the kit's 4 seqs; agents toward the fewest
    assert space.size() == 4 * 3 * 5
    path.write_text('[settings]\n"load.agents" = "many"\n')
    with pytest.raises(KitError, match="neither a list"):
        load_space(path, lambda key: None)
    assert load_space(Path("restore-stall"), lambda key: None).axes  # the shipped space


def test_hunt_finds_shrinks_and_writes_the_reproducer(tmp_path: Path) -> None:
    space = tmp_path / "space.toml"
    space.write_text(
        '[settings]\n"sim.engine.prefill_compute_share" = [0.4]\n'
        '"load.duration_s" = [1200]\n[seeds]\nmin = 8\nmax = 8\n'
    )
    out = tmp_path / "hunt"
    args = ["hunt", "--space", str(space), "--arm", "base", "--budget", "3", "--workers", "1"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    content = json.loads((out / "hunt.json").read_text())
    assert content["search_runs"] == 1 and content["shrunk"]["seed"] == 8
    assert content["shrunk"]["stalled"] == {"base": True}
    assert content["command"].startswith(f"kit ab --kit {out / 'reproducer.toml'}")
    assert "seed = 8" in (out / "reproducer.toml").read_text()
    steps = (out / "steps.txt").read_text().splitlines()
    assert len(steps) == 2 + 16 and all(" prefill " in s and " 0 " in s for s in steps[2:])
    nothing = CliRunner().invoke(app, [*args, "--arm", "fix", "--out", str(tmp_path / "h2")])
    assert nothing.exit_code == 0 and "nothing found" in nothing.output
    # base stalls there and fix does not: the arms disagree
    differ = CliRunner().invoke(app, [*args, "--differ", "--out", str(tmp_path / "h3")])
    assert differ.exit_code == 0, differ.output
    found = json.loads((tmp_path / "h3" / "hunt.json").read_text())["shrunk"]
    assert found["stalled"] == {"base": True, "fix": False}


def test_hunt_arms_come_from_arms_and_bad_ones_are_one_line(tmp_path: Path) -> None:
    from stallkit.kits.hunt.plan import hunt_arms
    from stallkit.kits.kit import load_kit

    kit = load_kit("restore-stall")

    def raw(*args: Any) -> dict[str, str]:
        return {name: spec.raw for name, spec in hunt_arms(kit, *args).items()}

    assert raw(None, "fix", False) == {"fix": "sim:fix"}
    assert raw("a=sim:fix,b=twin:stock", "b", False) == {"b": "twin:stock"}
    assert raw("a=sim:base,b=sim:fix", "fix", True) == {"a": "sim:base", "b": "sim:fix"}
    space = tmp_path / "space.toml"
    space.write_text('[settings]\n"load.agents" = [2, 3]\n')
    for args, said in (
        (["--arm", "nope"], "--arm nope is none of the arms (base, fix)"),
        (["--arms", "fix", "--differ"], "--differ needs two arms or more"),
        (["--arms", "base=url:http://127.0.0.1:9"], "does not run on the virtual clock"),
    ):
        out = tmp_path / "h"
        result = CliRunner().invoke(app, ["hunt", "--space", str(space), *args, "--out", str(out)])
        assert result.exit_code == 2 and said in result.output, result.output
        assert "Traceback" not in result.output and not out.exists()


def test_the_reproducer_replays_base_and_fix_or_what_the_point_showed() -> None:
    from stallkit.kits.hunt.plan import ab_pair

    named = {"base": "twin:patched:base", "fix": "twin:patched:fix"}
    assert ab_pair(named, {"fix": True}) == ("twin:patched:base", "twin:patched:fix")
    assert ab_pair(named, {"base": True}) == ("twin:patched:base", "twin:patched:fix")
    three = {"a": "sim:base", "b": "twin:stock", "c": "sim:fix"}
    # --differ: the arm that stalled as base, one that did not as fix
    assert ab_pair(three, {"a": False, "b": True, "c": True}) == ("twin:stock", "sim:base")
    # --arm b alone: b as base, another arm of --arms beside it
    assert ab_pair(three, {"b": True}) == ("twin:stock", "sim:base")
    assert ab_pair({"x": "sim:fix"}, {"x": True}) == ("sim:fix", "sim:fix")
