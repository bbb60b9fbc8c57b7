"""`kit sweep`: the plan from --vary (checked against the kit), the runs, the reports, --resume.

The pure parts directly; the command through typer's runner in process, its runs in real
worker processes on the virtual clock (deterministic: seed 8 of the README kit livelocks base
at about 900 engine s, fix never).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stallkit.contract.jsonl import read_jsonl
from stallkit.contract.sweep import SweepFile, SweepRun
from stallkit.kits.cli import app
from stallkit.kits.errors import KitError
from stallkit.kits.sweep.plan import build_plan, jobs, parse_arms, parse_vary, plan_specs

REPO = Path(__file__).resolve().parents[3]
SHARE = "sim.engine.prefill_compute_share"
SEQS = "sim.engine.max_num_seqs"


def test_vary_reads_lists_and_inclusive_ranges_exactly() -> None:
    assert parse_vary(f"{SHARE}=0.2:0.8:0.1").values == [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    assert parse_vary(f"{SEQS}=2:8:2").values == [2, 4, 6, 8]
    assert parse_vary("load.agents=6,12,24").values == [6, 12, 24]
    assert parse_vary("sim.engine.policy=base,fix").values == ["base", "fix"]
    for bad in ("load.agents", "load.agents=", "x=1:0:1", "x=1:2:0", "x=a:b:c", "x=1,,2", "x=1,1"):
        with pytest.raises(KitError):
            parse_vary(bad)


def test_plan_checks_every_value_and_cell_against_the_kit() -> None:
    arms, seeds = parse_arms(None), [1, 2]
    with pytest.raises(KitError, match=r"--vary sim\.engine\.nope=3"):
        build_plan("restore-stall", [parse_vary("sim.engine.nope=3")], arms, seeds, 60)
    with pytest.raises(KitError, match=rf"--vary {SEQS}=4,0: at 0, "):
        build_plan("restore-stall", [parse_vary(f"{SEQS}=4,0")], arms, seeds, 60)
    # each value is valid alone; together they are not (the batch must hold the sequences)
    together = [parse_vary(f"{SEQS}=4,64"), parse_vary("sim.engine.max_num_batched_tokens=32,2048")]
    with pytest.raises(KitError, match=r"--vary"):
        build_plan("restore-stall", together, arms, seeds, 60)
    with pytest.raises(KitError, match="does not run on the virtual clock"):
        parse_arms("base,fix=url:http://127.0.0.1:8000")
    assert parse_arms("base,fix=twin:stock") == {"base": "sim:base", "fix": "twin:stock"}
    plan = build_plan("restore-stall", [parse_vary(f"{SEQS}=2,4")], arms, seeds, 60)
    assert plan.duration_s == 60 and len(plan.cells()) == 2
    todo = jobs(plan, plan_specs(plan))
    assert [(j.cell, j.seed, j.arm) for j in todo[:3]] == [
        (0, 1, "base"),
        (0, 1, "fix"),
        (0, 2, "base"),
    ]
    assert len(todo) == 8


def test_bad_vary_is_one_line_with_exit_2() -> None:
    result = CliRunner().invoke(app, ["sweep", "--vary", "sim.engine.nope=1,2"])
    assert result.exit_code == 2
    assert "--vary sim.engine.nope" in result.output and "Traceback" not in result.output


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "s"
    args = ["sweep", "--vary", f"{SHARE}=0.4,0.6", "--seeds", "8,9", "--duration", "1200"]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--no-dashboard", "--workers", "2"])
    assert result.exit_code == 0, result.output
    return out


def _rows(path: Path) -> dict[tuple[int, str, int], dict[str, object]]:
    runs = read_jsonl(path / "sweep-runs.jsonl", SweepRun)
    return {(r.cell, r.arm, r.seed): r.model_dump(exclude={"compute_s"}) for r in runs}


def test_sweep_writes_runs_cells_and_heat_maps(swept: Path) -> None:
    rows = _rows(swept)
    assert len(rows) == 2 * 2 * 2
    stalled = rows[(0, "base", 8)]
    assert stalled["stalled"] and stalled["kind"] == "spinning"
    assert 800 < float(str(stalled["onset_s"])) < 1000
    assert not any(r["stalled"] for (_, arm, _), r in rows.items() if arm == "fix")
    content = SweepFile.model_validate_json((swept / "sweep.json").read_text())
    assert content.runs == 8 and content.missing == 0
    base0 = next(c for c in content.cells if c.cell == 0 and c.arm == "base")
    assert base0.settings == {SHARE: 0.4} and 8 in base0.stalled_seeds
    assert base0.rate.stall_rate_per_h is not None and base0.rate.ci95 is not None
    assert base0.verdict is not None and base0.verdict.base_stalled >= 1
    assert "kit ab --kit" in base0.replay and "--seeds 8-9" in base0.replay
    # the replay's kit file holds the cell's settings and the sweep's duration
    kit_file = Path(base0.replay.split("--kit ")[1].split()[0])
    text = kit_file.read_text()
    assert "prefill_compute_share = 0.4" in text and "duration_s = 1200" in text
    html = (swept / "sweep.html").read_text()
    assert html.count('href="#cell-') == 4 and 'id="cell-1"' in html
    assert "<script" not in html


def test_resume_runs_only_what_is_missing_and_gives_the_same_rows(
    swept: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "s"
    shutil.copytree(swept, copy)
    lines = (copy / "sweep-runs.jsonl").read_text().splitlines(keepends=True)
    (copy / "sweep-runs.jsonl").write_text("".join(lines[:5]))
    again = CliRunner().invoke(app, ["sweep", "--vary", f"{SHARE}=0.4", "--out", str(copy)])
    assert again.exit_code == 2 and "--resume" in again.output
    result = CliRunner().invoke(
        app, ["sweep", "--resume", "--out", str(copy), "--no-dashboard", "--workers", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "3 runs to go (5 recorded)" in " ".join(result.output.split())
    assert _rows(copy) == _rows(swept)  # the virtual clock is deterministic
    assert json.loads((copy / "sweep.json").read_text())["missing"] == 0


def test_resume_takes_the_command_that_made_the_sweep_and_names_a_difference(
    swept: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "s"
    shutil.copytree(swept, copy)
    lines = (copy / "sweep-runs.jsonl").read_text().splitlines(keepends=True)
    (copy / "sweep-runs.jsonl").write_text("".join(lines[:7]))
    made = ["sweep", "--vary", f"{SHARE}=0.4,0.6", "--seeds", "8,9", "--duration", "1200"]
    tail = ["--out", str(copy), "--resume", "--no-dashboard", "--workers", "1"]
    refused = {
        (f"{SHARE}=0.4,0.6,0.8", "8,9", "1200"): f"--vary {SHARE}=0.4,0.6,0.8, but the sweep ran",
        (f"{SHARE}=0.4,0.6", "8,9,10", "1200"): "--seeds 8,9,10, but the sweep ran seeds 8,9",
        (f"{SHARE}=0.4,0.6", "8,9", "600"): "--duration 600, but the sweep ran 1200 engine s",
        ("load.agents=2,4", "8,9", "1200"): "--vary load.agents, which the sweep does not vary",
    }
    for (vary, seeds, duration), says in refused.items():
        argv = ["sweep", "--vary", vary, "--seeds", seeds, "--duration", duration, *tail]
        done = CliRunner().invoke(app, argv)
        assert done.exit_code == 2 and says in done.stderr, done.output
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    swapped = CliRunner().invoke(app, [*made, "--arms", "fix,base", *tail])
    assert swapped.exit_code == 2 and "--arms fix=sim:fix,base=sim:base" in swapped.stderr
    assert len(read_jsonl(copy / "sweep-runs.jsonl", SweepRun)) == 7  # nothing ran
    result = CliRunner().invoke(app, [*made, *tail])
    assert result.exit_code == 0, result.output
    assert "1 runs to go (7 recorded)" in " ".join(result.output.split())
    assert _rows(copy) == _rows(swept)


@pytest.mark.wallclock
def test_ctrl_c_keeps_every_finished_run_and_the_reports(tmp_path: Path) -> None:
    out = tmp_path / "s"
    argv = [sys.executable, "-m", "stallkit", "sweep", "--vary", f"{SEQS}=4,6,8", "--seeds", "6"]
    argv += ["--duration", "1800", "--out", str(out), "--no-dashboard"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    runs = out / "sweep-runs.jsonl"
    deadline = time.monotonic() + 60
    while not (runs.exists() and len(runs.read_text().splitlines()) >= 2):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130, output
    assert "--resume" in output and "Traceback" not in output
    kept = read_jsonl(runs, SweepRun)
    content = SweepFile.model_validate_json((out / "sweep.json").read_text())
    assert len(kept) >= 2 and content.runs == len(kept) and content.missing == 36 - len(kept)


def test_a_vary_that_changes_nothing_in_an_arm_is_noted() -> None:
    from stallkit.contract.sweep import SweepPlan
    from stallkit.kits.sweep.plan import idle_axes

    def plan(kit: str, key: str, values: list[float | int], arms: dict[str, str]) -> SweepPlan:
        axes = [parse_vary(f"{key}={','.join(map(str, values))}")]
        return SweepPlan(kit=kit, kit_name=kit, axes=axes, arms=arms, seeds=[1], duration_s=60)

    sims = parse_arms(None)
    # the plugin's share is not the simulator's: a sim arm runs the same whatever its value
    notes = idle_axes(plan("restore-stall", "patched.prefill_compute_share", [0.2, 0.9], sims))
    assert [n.split(" changes nothing in arm ")[1].split(" ")[0] for n in notes] == ["base", "fix"]
    assert idle_axes(plan("restore-stall", SEQS, [2, 4], sims)) == []
    # cpu-patched's engine_args set --max-num-seqs 2: the twin takes its size from there, so
    # the simulator's value moves only the sim arm; the plugin's share moves only the twin
    mixed = {"base": "twin:patched:base", "fix": "sim:fix"}
    (note,) = idle_axes(plan("cpu-patched", SEQS, [1, 2], mixed))
    assert f"--vary {SEQS} changes nothing in arm base (twin:patched:base)" in note
    (note,) = idle_axes(plan("cpu-patched", "patched.prefill_compute_share", [0.5, 0.9], mixed))
    assert "arm fix (sim:fix)" in note


def test_a_twin_source_tree_is_not_a_setting_to_vary() -> None:
    for key in ("twin.overlay", "twin.arm_overlay.fix"):
        with pytest.raises(KitError, match=f"--vary {key}: a twin's source tree cannot vary"):
            build_plan("cpu-patched", [parse_vary(f"{key}=/a,/b")], parse_arms(None), [1], 60)


def test_ray_refuses_a_twin_arm_run_from_an_overlay(tmp_path: Path) -> None:
    from stallkit.kits.arm.kinds import arm_specs
    from stallkit.kits.kit import load_kit
    from stallkit.kits.sweep.runners import check_ray_arms

    kit = load_kit("cpu-patched")
    arms = arm_specs(kit, {"base": "twin:stock", "fix": "sim:fix"})
    check_ray_arms(kit, arms)  # no overlay: Ray's workers import the installed vLLM
    forked = kit.model_copy(update={"twin": kit.twin.model_copy(update={"overlay": str(tmp_path)})})
    with pytest.raises(KitError, match="--ray: twin arm base runs vLLM from an overlay"):
        check_ray_arms(forked, arms)
    check_ray_arms(forked, {"fix": arms["fix"]})  # an overlay touches twin arms only
