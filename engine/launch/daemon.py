"""What a docker daemon offers an image arm: a GPU runtime, a bridge network to publish on.

Asked of the arm's own docker host before any arm starts, so that a kit asking for GPUs on a
daemon without the NVIDIA runtime, or for a published port on a daemon without a bridge
network, is refused up front instead of after a pull and a failed `docker run`. The probe
(`probe_daemon`) is the I/O edge; reading its answers and deciding (`parse_runtimes`,
`parse_networks`, `daemon_problems`) are pure. Where docker cannot tell (no CLI, no daemon,
no answer in time) the probe says nothing; `daemon_error` says why in docker's own words, and
the plan refuses the arm with it before any arm starts, the cause first (`daemon_down`: no
docker command, no daemon reachable, no permission on its socket) and a short hint.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from typing import Literal

from stallkit.engine.launch.docker import docker_cli

#: a runtime whose name holds this gives containers GPUs (`nvidia`, `nvidia-cdi`, ...)
GPU_RUNTIME = "nvidia"
#: the network a container joins when the kit names none; `--publish` binds through it
DEFAULT_NETWORK = "bridge"
PROBE_TIMEOUT_S = 30.0

#: what a daemon lacks for an arm: the GPU runtime (`--gpus`), or the bridge (`--publish`)
DaemonProblem = Literal["no_gpu_runtime", "no_bridge"]


@dataclass(frozen=True)
class DaemonFacts:
    """What a docker daemon said about itself; None where it was not asked or did not say."""

    runtimes: frozenset[str] | None = None
    networks: frozenset[str] | None = None


def parse_runtimes(info_json: str) -> frozenset[str] | None:
    """The runtimes in `docker info --format '{{json .}}'` (its default one included);
    None when the text is not such an answer (a daemon that was not reached lists none)."""
    try:
        info = json.loads(info_json)
    except ValueError:
        return None
    if not isinstance(info, dict) or not isinstance(info.get("Runtimes"), dict):
        return None
    names = {str(name) for name in info["Runtimes"]}
    default = info.get("DefaultRuntime")
    if isinstance(default, str) and default:
        names.add(default)
    return frozenset(names)


def parse_networks(ls_output: str) -> frozenset[str]:
    """The network names `docker network ls --format '{{.Name}}'` printed, one a line."""
    return frozenset(line.strip() for line in ls_output.splitlines() if line.strip())


def needs_bridge(network: str) -> bool:
    """Whether an arm on this kit network publishes its port through the default bridge."""
    return network in ("", DEFAULT_NETWORK)


def daemon_problems(facts: DaemonFacts, *, gpus: bool, network: str) -> list[DaemonProblem]:
    """What the daemon lacks for an arm that asks for GPUs (`gpus`) on `network`; a fact the
    daemon did not tell is no problem."""
    problems: list[DaemonProblem] = []
    runtimes, networks = facts.runtimes, facts.networks
    if gpus and runtimes is not None and not any(GPU_RUNTIME in r for r in runtimes):
        problems.append("no_gpu_runtime")
    if needs_bridge(network) and networks is not None and DEFAULT_NETWORK not in networks:
        problems.append("no_bridge")
    return problems


def daemon_error(docker_host: str) -> str | None:
    """Why the daemon of `docker_host` cannot run an image (no docker CLI, no daemon, no
    answer in time), in docker's own words; None when it answers."""
    try:
        done = subprocess.run(
            [*docker_cli(docker_host), "info", "--format", "{{json .ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        return NO_DOCKER_CLI
    except subprocess.TimeoutExpired:
        return f"docker did not answer `docker info` in {PROBE_TIMEOUT_S:g} s"
    except OSError as exc:
        return f"docker cannot run: {exc.strerror or exc}"
    if done.returncode == 0:
        return None
    said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return said[-1] if said else f"`docker info` failed (exit {done.returncode})"


#: what `daemon_error` says when there is no docker command at all
NO_DOCKER_CLI = "docker is not installed (no `docker` command)"


def daemon_down(docker_host: str, said: str) -> tuple[str, str]:
    """The cause first and a short hint, for a daemon that cannot run images: `said` is
    `daemon_error`'s text (docker's own words). Pure: `DOCKER_HOST` is read by the caller's
    docker, so the hint names it only for the default host."""
    if said == NO_DOCKER_CLI:
        return said, "install docker (docs.docker.com/engine/install), or use another engine spec"
    where = f"at {docker_host}" if docker_host else _default_host()
    if "permission denied" in said.lower():
        return (
            f"no permission on the docker daemon's socket {where} ({said})",
            "add yourself to the docker group (sudo usermod -aG docker $USER), then log in again",
        )
    if docker_host:
        hint = "start docker there, or set the kit's engine.docker_host to a daemon that runs"
    else:
        hint = "start one (sudo systemctl start docker, or Docker Desktop), or set DOCKER_HOST"
    return f"no docker daemon reachable {where} ({said})", hint


def _default_host() -> str:
    host = os.environ.get("DOCKER_HOST", "")
    return f"at DOCKER_HOST={host}" if host else "on this machine"


def _ask(docker_host: str, args: list[str]) -> str | None:
    """The stdout of a docker command on `docker_host`, None if it failed or did not answer."""
    try:
        done = subprocess.run(
            [*docker_cli(docker_host), *args],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def probe_daemon(docker_host: str, *, runtimes: bool, networks: bool) -> DaemonFacts:
    """Ask the daemon of `docker_host` ("" = the default) for its runtimes and networks."""
    info = _ask(docker_host, ["info", "--format", "{{json .}}"]) if runtimes else None
    names = _ask(docker_host, ["network", "ls", "--format", "{{.Name}}"]) if networks else None
    return DaemonFacts(
        runtimes=parse_runtimes(info) if info is not None else None,
        networks=parse_networks(names) if names is not None else None,
    )
