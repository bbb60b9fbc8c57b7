"""The docker launcher against a real docker daemon and the engine image built offline.

Containers run on the host network: the launcher tells the engine a free loopback port, so
no container address is ever a target.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import httpx
import pytest

from stallkit.engine.errors import EngineError
from stallkit.engine.launch.base import free_port
from stallkit.engine.launch.docker import DockerLauncher, DockerOptions
from stallkit.engine.spec import parse_spec
from tests.docker.docker_support import REPO, DockerHosts, Images, ours

# the first docker test also waits for the session's image build (minutes without a cache)
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(420), pytest.mark.wallclock]


def _profile() -> dict[str, str]:
    """The restore-stall kit's env profile, as the fork's images take it."""
    kit = tomllib.loads((REPO / "kits" / "shipped" / "restore-stall.toml").read_text())
    env: dict[str, str] = kit["engine"]["env"]
    return env


def _launcher(
    image: str, host: str, log: Path, env: dict[str, str] | None = None, **opts: object
) -> DockerLauncher:
    options = DockerOptions(
        env=env if env is not None else _profile(),
        host_port=free_port(),
        shm_size="",
        network="host",
        docker_host=host,
        dcgm_url="{engine_url}/dcgm/metrics",
        name_prefix="stallkit-test",
        **opts,  # type: ignore[arg-type]
    )
    return DockerLauncher(parse_spec(image), options, log)


def test_image_runs_the_env_profile_and_is_removed(
    docker_hosts: DockerHosts, engine_images: Images, tmp_path: Path
) -> None:
    log = tmp_path / "engine.log"
    launcher = _launcher(engine_images.base, docker_hosts.a, log)
    try:
        launcher.start()
        launcher.wait_healthy(60)
        assert ours(docker_hosts.a) == [launcher.name]
        metrics = httpx.get(f"{launcher.url}/metrics", timeout=10).text
        assert re.search(r"vllm:scheduler_prefill_compute_share\{[^}]*\} 0\.4", metrics)
        dcgm = launcher.gpu_source
        assert str(dcgm) == f"dcgm:{launcher.url}/dcgm/metrics"
        gpus = httpx.get(dcgm.url, timeout=10).text
        # TP=2 in the profile: two simulated GPUs
        assert 'gpu="0"' in gpus and 'gpu="1"' in gpus
    finally:
        launcher.stop()
    assert ours(docker_hosts.a) == []
    text = log.read_text()
    # the profile's sizes: 4 seqs, 3.8 GB -> 319 blocks, 60 GB of LMCache -> 5042 blocks
    assert "profile restore-stall, policy base, engine sim" in text
    for part in (
        "policy=base",
        "max_num_seqs=4",
        "num_blocks=319",
        "prefill_compute_share=0.4",
        "host_tier_blocks=5042",
        "restore_max_wait_s=60",
        "num_gpus=2",
        f"serving on http://127.0.0.1:{launcher.opts.host_port}",
    ):
        assert part in text, part
    launcher.stop()  # idempotent


def test_container_that_exits_before_healthy_shows_its_last_line(
    docker_hosts: DockerHosts, engine_images: Images, tmp_path: Path
) -> None:
    launcher = _launcher(
        engine_images.base, docker_hosts.a, tmp_path / "engine.log", {"MAX_NUM_SEQS": "lots"}
    )
    try:
        launcher.start()
        with pytest.raises(EngineError, match="exited before it was healthy") as err:
            launcher.wait_healthy(60)
        assert "MAX_NUM_SEQS='lots' is not a whole number" in str(err.value)
        assert "exit code 2" in str(err.value)
    finally:
        launcher.stop()
    assert ours(docker_hosts.a) == []


def test_startup_timeout_stops_the_container(
    docker_hosts: DockerHosts, engine_images: Images, tmp_path: Path
) -> None:
    # a container that runs but never answers /health
    launcher = _launcher(
        engine_images.base,
        docker_hosts.a,
        tmp_path / "engine.log",
        extra_args=("--entrypoint", "/bin/sleep"),
        engine_args=("300",),
    )
    try:
        launcher.start()
        with pytest.raises(EngineError, match=r"was not healthy after 3 s"):
            launcher.wait_healthy(3)
        assert ours(docker_hosts.a) == [launcher.name]
    finally:
        launcher.stop()
    assert ours(docker_hosts.a) == []
