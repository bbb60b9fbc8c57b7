"""A plan's arms carry the capabilities their kit gives them, for meta.json and the reports."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from stallkit.contract.meta import EngineCapabilities
from stallkit.kits.ab.plan import Plan

IMAGES = {"base": "registry.local/stock-vllm:0.32", "fix": "registry.local/stock-vllm:0.32"}
PLUGIN_ON_CPU = EngineCapabilities(step_counter=True, restore_admission=False, gpu=False)


def _caps(plan: Plan) -> dict[str, EngineCapabilities]:
    return {arm.name: arm.spec.capabilities for arm in plan.arms}


def test_an_image_running_the_plugin_records_no_restore_admission(
    fake_docker: Path, tmp_path: Path
) -> None:
    plan = Plan.build("cpu-patched-docker", IMAGES, tmp_path / "out", {}, [])
    assert _caps(plan) == {"base": PLUGIN_ON_CPU, "fix": PLUGIN_ON_CPU}


def test_an_image_of_the_fork_keeps_restore_admission(fake_docker: Path, tmp_path: Path) -> None:
    plan = Plan.build("restore-stall", IMAGES, tmp_path / "out", {"engine.gpus": []}, [])
    assert _caps(plan) == dict.fromkeys(IMAGES, EngineCapabilities(gpu=False))


def test_patched_and_sim_arms_state_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the plan checks what the arm needs to start: vLLM here and a model directory
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("a patched arm needs vLLM to start")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}\n")
    monkeypatch.setenv("STALLKIT_TINY_MODEL", str(model))
    specs = {"base": "patched:base", "fix": "sim:fix"}
    plan = Plan.build("cpu-patched", specs, tmp_path / "out", {}, [])
    assert _caps(plan) == {"base": PLUGIN_ON_CPU, "fix": EngineCapabilities(gpu=False)}
