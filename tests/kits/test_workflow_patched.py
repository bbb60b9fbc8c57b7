"""The nightly workflow's patched-plugin job: its kit and `kit ab` command plan two docker arms."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml
from typer.testing import CliRunner

from stallkit.kits.cli import app

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "nightly-gpu.yml"


def test_patched_job_ab_command_plans_the_stock_image_with_the_overlay(
    fake_docker: Path, tmp_path: Path
) -> None:
    # the fake docker stands for the GPU runner's (its daemon has the NVIDIA runtime)
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["patched-ab"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    (step,) = [s for s in job["steps"] if "kit ab" in s.get("run", "")]
    argv = shlex.split(step["run"])
    assert "--strict" in argv
    kit_text = (REPO / "kits" / "shipped" / "gpu-patched-docker.toml").read_text()
    kit = tmp_path / "gpu-patched-docker.toml"
    kit.write_text(kit_text.replace('"MODEL"', '"/models/m"'))
    values = {
        "$RUNNER_TEMP/gpu-patched-docker.toml": str(kit),
        "$STOCK_IMAGE": "vllm/vllm-openai:v0.32.0",
        "$GITHUB_WORKSPACE/engine:/opt/stallkit/stallkit/engine": f"{REPO / 'engine'}:/opt/stallkit/stallkit/engine",
        # the plugin exports its metrics under the shared names in contract/ (as the real-
        # container test in tests/docker runs it)
        "$GITHUB_WORKSPACE/contract:/opt/stallkit/stallkit/contract": f"{REPO / 'contract'}:/opt/stallkit/stallkit/contract",
        "$RUN_DIR": str(tmp_path / "nightly"),
    }
    args = [values.get(a, a) for a in argv[2:]]
    overlays = [args[i + 1] for i, a in enumerate(args) if a == "--overlay"]
    assert overlays == [values[k] for k in list(values)[2:4]], overlays
    result = CliRunner().invoke(app, ["ab", *args, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "base: vllm/vllm-openai:v0.32.0 (docker; gpus [0, 1]" in result.output
    assert "fix: vllm/vllm-openai:v0.32.0 (docker" in result.output
