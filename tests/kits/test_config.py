"""Kits: shipped kits validate, errors name the key and line, overrides and time scaling."""

from __future__ import annotations

from pathlib import Path

import pytest

from stallkit.engine.spec import parse_spec
from stallkit.kits.ab.execute import Plan
from stallkit.kits.arm.launchers import load_config, monitor_config, time_scale
from stallkit.kits.errors import KitError
from stallkit.kits.kit import load_kit, shipped_kits


def test_shipped_kits_validate() -> None:
    assert {"restore-stall", "cpu-smoke"} <= set(shipped_kits())
    for name in shipped_kits():
        assert load_kit(name).name == name


def test_restore_stall_is_the_seed_setup() -> None:
    kit = load_kit("restore-stall")
    env = kit.engine.env
    assert (env["TP"], env["DCP"], env["MAX_NUM_SEQS"], env["PREFILL_COMPUTE_SHARE"]) == (
        "2",
        "2",
        "4",
        "0.4",
    )
    assert float(env["KV_CACHE_MEMORY_BYTES"]) == 3.8e9
    assert (kit.sim.engine.max_num_seqs, kit.sim.engine.num_blocks) == (4, 319)
    assert (kit.load.agents, kit.load.min_context, kit.load.max_context) == (12, 40_000, 100_000)
    assert (kit.load.read_timeout_s, kit.load.duration_s, kit.monitor.stop_after_s) == (
        600,
        5400,
        240,
    )


def test_unknown_key_names_the_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "k.toml"
    path.write_text('name = "k"\n\n[load]\nagents = 2\nagentz = 3\nduration_s = 10\n')
    with pytest.raises(KitError, match=r"k\.toml:5: load\.agentz: unknown key"):
        load_kit(str(path))


def test_bad_value_and_bad_toml_are_kit_errors(tmp_path: Path) -> None:
    path = tmp_path / "k.toml"
    path.write_text(
        'name = "k"\n[monitor]\nstall_after_s = 100\nstop_after_s = 10\n[load]\nduration_s = 5\n'
    )
    with pytest.raises(KitError, match="stop_after_s"):
        load_kit(str(path))
    path.write_text("name = [\n")
    with pytest.raises(KitError, match="not valid TOML"):
        load_kit(str(path))
    with pytest.raises(KitError, match="no kit named 'nope'") as excinfo:
        load_kit("nope")
    assert "restore-stall" in excinfo.value.hint


def test_overrides_and_time_scaling() -> None:
    kit = load_kit("restore-stall", {"load.duration_s": 600.0, "sim.time_scale": 60.0})
    sim, real = parse_spec("sim:base"), parse_spec("registry/fork:fix")
    assert time_scale(sim, kit) == 60.0 and time_scale(real, kit) == 1.0
    load = load_config(kit, 60.0)
    assert load.duration_s == 10.0 and load.read_timeout_s == 10.0
    assert load.connect_timeout_s == kit.load.connect_timeout_s  # wall-only
    assert load.think_max_s == pytest.approx(kit.load.think_max_s / 60)
    mon = monitor_config(kit, 60.0)
    assert (mon.stall_after_s, mon.stop_after_s) == (1.0, 4.0)
    assert mon.interval_s == 0.05  # floored, never a busy loop


def test_parallel_refused_when_gpu_sets_overlap(tmp_path: Path, fake_docker: Path) -> None:
    with pytest.raises(KitError, match="both use GPU 0"):
        Plan.build(
            "restore-stall",
            {"base": "reg/a:1", "fix": "reg/b:1"},
            tmp_path / "o",
            {},
            [],
            parallel=True,
        )
    kit = tmp_path / "k.toml"
    text = (Path(__file__).parents[2] / "kits" / "shipped" / "restore-stall.toml").read_text()
    kit.write_text(text.replace("[engine]\n", "[engine]\narm_gpus = { fix = [2, 3] }\n", 1))
    plan = Plan.build(
        str(kit), {"base": "reg/a:1", "fix": "reg/b:1"}, tmp_path / "o", {}, [], parallel=True
    )
    assert "fix: reg/b:1 (docker; gpus [2, 3]" in plan.describe()


def test_existing_output_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "turns.jsonl").write_text("{}\n")
    with pytest.raises(KitError, match="already holds files"):
        Plan.build("restore-stall", {"run": "sim:base"}, tmp_path, {}, [])


def test_default_seeds_ten_for_virtual_sim_ab_one_otherwise(
    tmp_path: Path, fake_docker: Path
) -> None:
    sims = {"base": "sim:base", "fix": "sim:fix"}
    virtual = Plan.build("restore-stall", sims, tmp_path / "a", {}, [], clock="virtual")
    assert virtual.seeds == list(range(8, 18))
    images = {"base": "reg/x:1", "fix": "reg/y:1"}
    docker = Plan.build("restore-stall", images, tmp_path / "b", {}, [], clock="virtual")
    assert docker.seeds == [8] and not any(docker.virtual(a) for a in docker.arms)
    wall = Plan.build("restore-stall", sims, tmp_path / "c", {}, [], clock="wall")
    assert wall.seeds == [8]
    seeded = Plan.build(
        "restore-stall", sims, tmp_path / "d", {"load.seed": 3}, [], clock="virtual"
    )
    assert seeded.seeds == [3]
    listed = Plan.build("restore-stall", sims, tmp_path / "e", {}, [], seeds="4-6", clock="virtual")
    assert listed.seeds == [4, 5, 6]
    assert listed.seed_dir(listed.arms[0], 5) == tmp_path / "e" / "base" / "seed-5"
