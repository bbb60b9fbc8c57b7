"""The nightly GPU workflow: the `kit ab` command it runs parses and plans docker arms.

actionlint itself runs in `.ci/run`; this test holds the command line to the CLI.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml
from typer.testing import CliRunner

from stallkit.kits.cli import app

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "nightly-gpu.yml"


def _ab_command() -> tuple[list[str], dict[str, str]]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    job = doc["jobs"]["ab"]
    (step,) = [s for s in job["steps"] if "kit ab" in s.get("run", "")]
    return shlex.split(step["run"]), job["env"]


def test_workflow_runs_nightly_and_by_hand_with_image_inputs() -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    triggers = doc[True]  # YAML 1.1 reads the key `on` as a boolean
    assert triggers["schedule"][0]["cron"]
    assert {"base_image", "fix_image"} <= set(triggers["workflow_dispatch"]["inputs"])
    assert "self-hosted" in doc["jobs"]["ab"]["runs-on"] and "gpu" in doc["jobs"]["ab"]["runs-on"]
    steps = doc["jobs"]["ab"]["steps"]
    assert any("GITHUB_STEP_SUMMARY" in s.get("run", "") for s in steps)
    assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in steps)


def test_workflow_ab_command_parses(fake_docker: Path, tmp_path: Path) -> None:
    # the fake docker stands for the GPU runner's (its daemon has the NVIDIA runtime)
    argv, env = _ab_command()
    assert argv[0].endswith("kit") and argv[1] == "ab"
    assert "--strict" in argv
    values = {
        "$BASE_IMAGE": "registry.example/fork:base",
        "$FIX_IMAGE": "registry.example/fork:fix",
        "$KIT": "restore-stall",
        "$RUN_DIR": str(tmp_path / "nightly"),
    }
    assert {name.lstrip("$") for name in values} <= set(env)
    args = [values.get(a, a) for a in argv[2:]]
    result = CliRunner().invoke(app, ["ab", *args, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "base: registry.example/fork:base (docker; gpus [0, 1]" in result.output
    assert "fix: registry.example/fork:fix (docker" in result.output
    assert not (tmp_path / "nightly").exists(), "a dry run starts and writes nothing"


def test_remote_docker_host_step_writes_a_kit_that_targets_it(tmp_path: Path) -> None:
    import os
    import subprocess

    from stallkit.kits.kit import load_kit

    doc = yaml.safe_load(WORKFLOW.read_text())
    (step,) = [s for s in doc["jobs"]["ab"]["steps"] if s.get("name") == "Remote docker host"]
    assert "ENGINE_DOCKER_HOST" in step["if"]
    job_env = doc["jobs"]["ab"]["env"]
    env = dict(os.environ)
    env.update(
        KIT="restore-stall",
        ENGINE_DOCKER_HOST="tcp://127.0.0.1:2375",  # not ssh://: no tunnel is opened
        ENGINE_PORT=job_env["ENGINE_PORT"],
        DCGM_PORT=job_env["DCGM_PORT"],
        RUNNER_TEMP=str(tmp_path),
        GITHUB_ENV=str(tmp_path / "github-env"),
    )
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]], env=env, cwd=WORKFLOW.parents[2], check=False
    )
    assert done.returncode == 0
    kit_line = (tmp_path / "github-env").read_text().strip()
    assert kit_line == f"KIT={tmp_path / 'remote-kit.toml'}"
    kit = load_kit(kit_line.removeprefix("KIT="))
    assert kit.name == "restore-stall"
    assert kit.engine.host.docker_host == "tcp://127.0.0.1:2375"
    assert kit.engine.host.host_port == 18000
    assert kit.engine.host.dcgm_url == "http://127.0.0.1:19400/metrics"
