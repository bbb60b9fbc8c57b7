"""The plan's docker host check against a real daemon: the test daemons run with
`--bridge=none` and no NVIDIA runtime, so a kit asking them for GPUs or a published port is
refused before anything starts, naming the kit key to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from stallkit.engine.launch.daemon import probe_daemon
from stallkit.kits.ab.execute import Plan
from stallkit.kits.errors import KitError
from tests.docker.docker_support import DockerHosts

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

IMAGES = {"base": "registry/fork:base", "fix": "registry/fork:fix"}


def test_the_probe_reads_the_daemons_runtimes_and_networks(docker_hosts: DockerHosts) -> None:
    facts = probe_daemon(docker_hosts.a, runtimes=True, networks=True)
    assert facts.runtimes is not None and "runc" in facts.runtimes
    assert not any("nvidia" in name for name in facts.runtimes)
    assert facts.networks is not None and "host" in facts.networks
    assert "bridge" not in facts.networks


def test_the_plan_asks_each_arms_docker_host(docker_hosts: DockerHosts, tmp_path: Path) -> None:
    host = {"engine.host": {"docker_host": docker_hosts.a}}
    cpu = {**host, "engine.gpus": [], "engine.network": "host"}
    Plan.build("restore-stall", IMAGES, tmp_path / "ok", cpu, [])
    with pytest.raises(KitError, match="has no GPU runtime") as caught:
        Plan.build("restore-stall", IMAGES, tmp_path / "gpu", {**cpu, "engine.gpus": [0]}, [])
    assert "engine.gpus = []" in caught.value.hint
    with pytest.raises(KitError, match="has no bridge network") as caught:
        Plan.build("restore-stall", IMAGES, tmp_path / "port", {**cpu, "engine.network": ""}, [])
    assert 'engine.network = "host"' in caught.value.hint
