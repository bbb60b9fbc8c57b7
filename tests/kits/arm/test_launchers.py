"""Launchers against real processes: the simulator child, and docker through a fake CLI.

The fake `docker` first on PATH records its arguments and runs the simulator as the
container, so the argument forms (GPU flags included, which no machine here can honour) are
checked without a docker engine; tests/docker runs the launcher against a real one.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import psutil
import pytest

from stallkit.engine.errors import EngineError
from stallkit.engine.launch.base import free_port
from stallkit.engine.launch.docker import (
    DockerLauncher,
    DockerOptions,
    Overlay,
    docker_cli,
    docker_run_argv,
)
from stallkit.engine.launch.sim import SimLauncher, dump_toml
from stallkit.engine.spec import parse_spec
from stallkit.kits.arm.launchers import make_launcher, time_scale
from stallkit.kits.errors import KitError
from stallkit.kits.kit import load_kit
from tests.support import still_alive


def _calls(state: Path) -> list[list[str]]:
    return [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines()]


def test_docker_run_argv_uses_real_cli_forms(tmp_path: Path) -> None:
    opts = DockerOptions(
        gpus=(5, 6),
        env={"TP": "2", "MAX_NUM_SEQS": "4"},
        container_port=8000,
        host_port=18000,
        overlays=(Overlay(tmp_path, "/usr/lib/python3/dist-packages/vllm"),),
        engine_args=("--x", "1"),
    )
    argv = docker_run_argv("registry/fork:base", "stallkit-abc", opts)
    assert argv[:4] == ["docker", "run", "--detach", "--name"]
    assert argv[argv.index("--gpus") + 1] == '"device=5,6"'
    assert argv[argv.index("--publish") + 1] == "127.0.0.1:18000:8000"
    assert "--ipc=host" in argv
    envs = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    assert envs == ["TP=2", "MAX_NUM_SEQS=4"]
    assert argv[argv.index("--volume") + 1] == f"{tmp_path}:/usr/lib/python3/dist-packages/vllm:ro"
    assert argv[-3:] == ["registry/fork:base", "--x", "1"]


def test_overlay_needs_an_existing_source_and_absolute_dest(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="bad overlay"):
        Overlay.parse(f"{tmp_path}:relative/path")
    with pytest.raises(EngineError, match="does not exist"):
        Overlay.parse(f"{tmp_path}/nope:/opt/x")


def test_docker_launcher_runs_follows_logs_and_removes(fake_docker: Path, tmp_path: Path) -> None:
    port = free_port()
    launcher = DockerLauncher(
        parse_spec("registry.local/fork:fix"),
        DockerOptions(gpus=(0, 1), env={"PROFILE": "x"}, container_port=8000, host_port=port),
        tmp_path / "engine.log",
    )
    try:
        launcher.start()
        launcher.wait_healthy(60)
        assert httpx.get(f"{launcher.url}/health").status_code == 200
        pid = int((fake_docker / f"{launcher.name}.pid").read_text())
        assert psutil.pid_exists(pid)
    finally:
        launcher.stop()
    calls = _calls(fake_docker)
    run = next(c for c in calls if c[0] == "run")
    assert run[run.index("--gpus") + 1] == '"device=0,1"'
    assert ["rm", "--force", launcher.name] in calls
    assert not still_alive([pid])
    assert str(launcher.gpu_source) in ("nvml:0,1", "smi:0,1")
    assert "listening on" in (tmp_path / "engine.log").read_text()


def test_docker_container_that_exits_shows_its_last_lines(
    fake_docker: Path, tmp_path: Path
) -> None:
    launcher = DockerLauncher(
        parse_spec("registry.local/crash:1"),
        DockerOptions(host_port=free_port()),
        tmp_path / "engine.log",
    )
    try:
        launcher.start()
        with pytest.raises(EngineError, match="cannot allocate KV cache"):
            launcher.wait_healthy(30)
    finally:
        launcher.stop()
    assert ["rm", "--force", launcher.name] in _calls(fake_docker)


def test_missing_image_is_a_clear_error_and_starts_nothing(
    fake_docker: Path, tmp_path: Path
) -> None:
    launcher = DockerLauncher(
        parse_spec("registry.local/missing:1"), DockerOptions(), tmp_path / "e.log"
    )
    with pytest.raises(EngineError, match="not available"):
        launcher.start()
    launcher.stop()
    assert not any(c[0] == "run" for c in _calls(fake_docker))


def test_sim_launcher_stop_leaves_no_process(tmp_path: Path) -> None:
    launcher = SimLauncher(parse_spec("sim:fix"), tmp_path, {"max_num_seqs": 4}, time_scale=10.0)
    launcher.start()
    try:
        launcher.wait_healthy(30)
        root = psutil.Process(launcher.pids()[0])
        family = [root.pid] + [c.pid for c in root.children(recursive=True)]
        assert str(launcher.gpu_source).endswith("/dcgm/metrics")
        assert httpx.get(f"{launcher.url}/v1/models").json()["data"]
    finally:
        launcher.stop()
    assert not still_alive(family)
    launcher.stop()  # idempotent


def test_dump_toml_round_trips() -> None:
    import tomllib

    data = {
        "a": 1,
        "b": 0.5,
        "c": 'x"y',
        "d": [1, 2],
        "e": True,
        "cost": {"k": 2.5, "inner": {"z": 1}},
    }
    assert tomllib.loads(dump_toml(data)) == data


def test_host_network_tells_the_engine_its_loopback_port_and_publishes_nothing() -> None:
    opts = DockerOptions(
        env={"PORT": "8000", "TP": "2"}, host_port=18001, network="host", gpus=(0,)
    )
    argv = docker_run_argv("registry/fork:base", "stallkit-x", opts)
    assert "--publish" not in argv
    assert argv[argv.index("--network") + 1] == "host"
    envs = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    # the kit's PORT is the container's; on the host network the engine takes the free one
    assert envs == ["PORT=18001", "TP=2", "HOST=127.0.0.1"]
    assert argv[argv.index("--gpus") + 1] == '"device=0"'


def test_docker_cli_names_the_host_or_context() -> None:
    assert docker_cli("") == ["docker"]
    assert docker_cli("ssh://me@gpu-box") == ["docker", "--host", "ssh://me@gpu-box"]
    assert docker_cli("unix:///tmp/d.sock") == ["docker", "--host", "unix:///tmp/d.sock"]
    assert docker_cli("gpu-box") == ["docker", "--context", "gpu-box"]


def test_kit_docker_hosts_per_arm_reach_the_launcher(tmp_path: Path) -> None:
    kit = load_kit(
        "restore-stall",
        {
            "engine.host": {"docker_host": "unix:///tmp/a.sock"},
            "engine.arm_hosts": {
                "fix": {
                    "docker_host": "ssh://me@gpu-box",
                    "host_port": 18080,
                    "dcgm_url": "http://127.0.0.1:19400/metrics",
                }
            },
            "engine.network": "host",
            "engine.time_scale": 60.0,
        },
    )
    spec = parse_spec("registry/fork:base")
    base = make_launcher("base", spec, kit, tmp_path / "base")
    fix = make_launcher("fix", spec, kit, tmp_path / "fix", [Overlay(tmp_path, "/opt/x")])
    assert isinstance(base, DockerLauncher) and isinstance(fix, DockerLauncher)
    assert base.opts.docker_host == "unix:///tmp/a.sock"
    assert fix.opts.docker_host == "ssh://me@gpu-box"
    assert fix.url == "http://127.0.0.1:18080"
    assert str(fix.gpu_source) == "dcgm:http://127.0.0.1:19400/metrics"
    assert str(base.gpu_source) in ("nvml:0,1", "smi:0,1")  # the kit's GPUs, no DCGM URL
    # a simulator image runs at the kit's scale
    assert fix.opts.overlays == (Overlay(tmp_path, "/opt/x"),)
    assert fix.opts.env["STALLKIT_TIME_SCALE"] == "60.0"
    assert time_scale(spec, kit) == 60.0


@pytest.mark.parametrize(
    "host",
    ["http://gpu-box:2375", "ssh://", "not a context"],
)
def test_bad_docker_host_is_a_kit_error(host: str) -> None:
    with pytest.raises(KitError, match=r"engine\.host\.docker_host"):
        load_kit("restore-stall", {"engine.host": {"docker_host": host}})


def test_parallel_arms_on_different_hosts_may_use_the_same_gpu_indices(
    tmp_path: Path, fake_docker: Path
) -> None:
    from stallkit.kits.ab.execute import Plan

    hosts = {"base": {"docker_host": "unix:///tmp/a.sock"}, "fix": {"docker_host": "gpu-box"}}
    specs = {"base": "registry/fork:base", "fix": "registry/fork:fix"}
    plan = Plan.build("restore-stall", specs, tmp_path / "a", {"engine.arm_hosts": hosts}, [], True)
    assert plan.parallel
    with pytest.raises(KitError, match="both use GPU 0"):
        Plan.build("restore-stall", specs, tmp_path / "b", {}, [], True)
