"""The two-sided verdict end to end: a fix made 30 % slower stalls less but loses goodput.

Slow tier: two `kit ab` runs of the README kit on the virtual clock (deterministic), five seeds
whose base arm livelocks within 1000 engine seconds, about 6 s of CPU each: the smallest run
in which both halves of the verdict are significant. The slowed fix (`[sim] step_cost_scale`)
must be reported as stalling less but worse than the base by more than the margin on goodput,
and `--strict` must exit 1 for it; the unchanged fix passes both, and `--strict` exits 0.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from stallkit.engine import parse_spec
from stallkit.kits.ab.plan import Plan
from stallkit.kits.arm.kinds import kind_of
from stallkit.kits.errors import KitError
from stallkit.kits.kit import load_kit
from tests.support import kit

REPO = Path(__file__).resolve().parents[2]
#: seeds whose base arm livelocks at 501-901 engine s on the README kit
SEEDS = "8,15,18,23,28"


def _kit_file(tmp_path: Path, scale: str | None) -> Path:
    text = (REPO / "kits" / "shipped" / "restore-stall.toml").read_text()
    if scale is not None:
        text = text.replace("time_scale = 30\n", f"time_scale = 30\nstep_cost_scale = {scale}\n")
    path = tmp_path / "kit.toml"
    path.write_text(text)
    return path


def _ab(tmp_path: Path, scale: str | None) -> tuple[int, str, dict[str, Any]]:
    out = tmp_path / "ab"
    args = ["ab", "--kit", str(_kit_file(tmp_path, scale)), "--seeds", SEEDS]
    done = kit(*args, "--duration", "1200", "--strict", "--no-dashboard", "--out", str(out))
    return done.returncode, done.stderr, json.loads((out / "ab.json").read_text())


def _goodput(data: dict[str, Any]) -> dict[str, Any]:
    (test,) = [t for t in data["verdict"]["noninferiority"] if t["figure"] == "goodput"]
    return dict(test)


@pytest.mark.slow
def test_a_fix_made_30_percent_slower_stalls_less_but_is_inferior_on_goodput(
    tmp_path: Path,
) -> None:
    code, stderr, data = _ab(tmp_path, "{fix = 1.3}")
    assert data["verdict"]["conclusion"] == "fix_better"
    goodput = _goodput(data)
    assert goodput["answer"] == "no" and goodput["method"] == "paired t over seeds"
    assert goodput["worse_ci90"][0] > 5.0  # worse by more than the margin, shown
    assert code == 1
    assert "strict: fix is worse than base by more than 5 % on goodput" in stderr
    md = (tmp_path / "ab" / "ab.md").read_text()
    assert "| fix is not worse than base by more than 5 % on goodput |  | no (" in md


@pytest.mark.slow
def test_the_unchanged_fix_passes_both_halves(tmp_path: Path) -> None:
    code, stderr, data = _ab(tmp_path, None)
    assert data["verdict"]["conclusion"] == "fix_better"
    assert _goodput(data)["answer"] == "yes"
    assert code == 0, stderr[-2000:]
    fix = data["arms"]["fix"]
    assert fix["slo"]["goodput_rps"]["ci95"] is not None
    assert all(seed["slo"]["window_s"] > 0 for seed in fix["seeds"])


def test_the_step_cost_factor_reaches_the_arm_on_both_clocks(tmp_path: Path) -> None:
    slowed = load_kit(str(_kit_file(tmp_path, "{fix = 1.3}")))
    spec = parse_spec("sim:fix")
    plain = slowed.sim.engine.cost
    # the virtual clock: the arm's in-process core
    log = logging.getLogger("test")
    fix: Any = kind_of(spec).core(slowed, spec, "fix", log)
    base: Any = kind_of(spec).core(slowed, spec, "base", log)
    assert fix.config.cost.step_overhead_s == pytest.approx(1.3 * plain.step_overhead_s)
    assert base.config.cost == plain
    # the wall clock: the configuration the served simulator reads
    kind_of(spec).launcher("fix", spec, slowed, tmp_path / "fix", tmp_path / "fix.log", [])
    text = (tmp_path / "fix" / "sim-config.toml").read_text()
    assert f"prefill_per_token_s = {1.3 * plain.prefill_per_token_s!r}" in text


def test_a_step_cost_factor_for_an_arm_that_is_not_the_simulator_is_refused(
    tmp_path: Path,
) -> None:
    path = _kit_file(tmp_path, "{fix = 1.3}")
    with pytest.raises(KitError, match=r"sim\.step_cost_scale\.fix: url:http"):
        Plan.build(str(path), {"base": "sim:base", "fix": "url:http://127.0.0.1:1"}, None, {}, [])
