"""Reading docker's answers: the reason line of a failed command, and what a daemon offers.

Pure functions over the text the real docker CLI prints (the forms below are copied from
docker 20-28); the same decisions against a fake CLI and a real daemon are in tests/kits and
tests/docker.
"""

from __future__ import annotations

import json

import pytest

from stallkit.engine.launch.daemon import (
    DaemonFacts,
    daemon_problems,
    needs_bridge,
    parse_networks,
    parse_runtimes,
)
from stallkit.engine.launch.docker import docker_error_line

NO_GPU = (
    'docker: Error response from daemon: could not select device driver "" with '
    "capabilities: [[gpu]].\n\nRun 'docker run --help' for more information\n"
)


@pytest.mark.parametrize(
    ("stderr", "line"),
    [
        (
            NO_GPU,
            'Error response from daemon: could not select device driver "" with '
            "capabilities: [[gpu]].",
        ),
        # docker before 23 pointed at the help with "See"
        (
            "docker: Error response from daemon: driver failed programming external "
            "connectivity: Bind for 127.0.0.1:8000 failed: port is already allocated.\n"
            "See 'docker run --help'.\n",
            "Error response from daemon: driver failed programming external connectivity: "
            "Bind for 127.0.0.1:8000 failed: port is already allocated.",
        ),
        # the pull's progress comes first; the error line is the reason
        (
            "Unable to find image 'x/y:1' locally\ndocker: Error response from daemon: pull "
            "access denied for x/y\nRun 'docker run --help' for more information\n",
            "Error response from daemon: pull access denied for x/y",
        ),
        (
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker "
            "daemon running?\n",
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker "
            "daemon running?",
        ),
        ("", "no output"),
        ("\n\nRun 'docker run --help' for more information\n", "no output"),
    ],
)
def test_the_error_line_is_dockers_reason_not_its_help_pointer(stderr: str, line: str) -> None:
    assert docker_error_line(stderr) == line


def _info(runtimes: list[str], default: str = "runc") -> str:
    return json.dumps({"Runtimes": {r: {"path": r} for r in runtimes}, "DefaultRuntime": default})


def test_runtimes_are_read_from_docker_info() -> None:
    assert parse_runtimes(_info(["io.containerd.runc.v2", "nvidia", "runc"])) == frozenset(
        {"io.containerd.runc.v2", "nvidia", "runc"}
    )
    assert parse_runtimes(_info(["runc"], default="nvidia")) == frozenset({"runc", "nvidia"})
    # a daemon that was not reached: the CLI prints its own half, with no runtimes
    assert parse_runtimes(json.dumps({"ID": "", "Runtimes": None})) is None
    assert parse_runtimes("not json") is None
    assert parse_runtimes("[]") is None


def test_networks_are_read_one_a_line() -> None:
    assert parse_networks("bridge\nhost\nnone\n") == {"bridge", "host", "none"}
    assert parse_networks("\n") == frozenset()


def test_gpus_need_an_nvidia_runtime() -> None:
    cpu_only = DaemonFacts(runtimes=parse_runtimes(_info(["io.containerd.runc.v2", "runc"])))
    assert daemon_problems(cpu_only, gpus=True, network="host") == ["no_gpu_runtime"]
    assert daemon_problems(cpu_only, gpus=False, network="host") == []
    for names in (["runc", "nvidia"], ["runc", "nvidia-cdi"]):
        gpu = DaemonFacts(runtimes=frozenset(names))
        assert daemon_problems(gpu, gpus=True, network="host") == []


def test_a_published_port_needs_the_bridge_network() -> None:
    no_bridge = DaemonFacts(networks=parse_networks("host\nnone\n"))  # dockerd --bridge=none
    assert daemon_problems(no_bridge, gpus=False, network="") == ["no_bridge"]
    assert daemon_problems(no_bridge, gpus=False, network="bridge") == ["no_bridge"]
    assert daemon_problems(no_bridge, gpus=False, network="host") == []
    with_bridge = DaemonFacts(networks=parse_networks("bridge\nhost\nnone\n"))
    assert daemon_problems(with_bridge, gpus=False, network="") == []
    assert needs_bridge("") and needs_bridge("bridge") and not needs_bridge("host")


def test_what_the_daemon_did_not_say_is_no_problem() -> None:
    both = DaemonFacts(runtimes=frozenset({"runc"}), networks=frozenset({"host"}))
    assert daemon_problems(both, gpus=True, network="") == ["no_gpu_runtime", "no_bridge"]
    assert daemon_problems(DaemonFacts(), gpus=True, network="") == []
