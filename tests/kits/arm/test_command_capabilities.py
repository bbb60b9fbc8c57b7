"""An arm records the same capabilities whichever command runs it: `kit sweep` and `kit hunt`
hand their runs the spec `kit ab` plans, with what the kit gives the arm (restore-stall-twin's
KV connector gives the patched twin its restore admission)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from stallkit.contract.meta import EngineCapabilities
from stallkit.kits.ab.plan import Plan
from stallkit.kits.hunt.plan import hunt_arms
from stallkit.kits.kit import load_kit
from stallkit.kits.sweep.plan import build_plan, jobs, parse_vary, plan_specs

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="twin arms need vLLM to plan"
)

KIT = "restore-stall-twin"
ARMS = {"base": "twin:patched:base", "fix": "twin:patched:fix"}


def _ab(tmp_path: Path) -> dict[str, EngineCapabilities]:
    plan = Plan.build(KIT, ARMS, tmp_path / "ab", {}, [])
    return {arm.name: arm.spec.capabilities for arm in plan.arms}


def test_a_sweep_run_has_the_capabilities_of_the_ab_arm(tmp_path: Path) -> None:
    ab = _ab(tmp_path)
    assert ab["fix"].restore_admission  # the connector's host tier: restores are admitted
    plan = build_plan(KIT, [parse_vary("load.agents=2,3")], dict(ARMS), [8], 60)
    handed = {job.arm: job.spec.capabilities for job in jobs(plan, plan_specs(plan))}
    assert handed == ab


def test_a_hunt_run_has_the_capabilities_of_the_ab_arm(tmp_path: Path) -> None:
    arms = hunt_arms(load_kit(KIT), "base=twin:patched:base,fix=twin:patched:fix", "fix", True)
    handed = {name: spec.capabilities for name, spec in arms.items()}
    assert handed == _ab(tmp_path)
