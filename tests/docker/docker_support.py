"""Helpers of the docker tests: the daemons and images they get, our containers on a host,
a short image-arm kit, and polling."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
IMAGE = "stallkit-test/engine"
STOCK_IMAGE = "stallkit-test/vllm-stock:0.32"


@dataclass(frozen=True)
class DockerHosts:
    """Two docker daemons on this machine, as DOCKER_HOST URLs."""

    a: str
    b: str


@dataclass(frozen=True)
class Images:
    """The engine images the tests run, and what building them took."""

    base: str
    fix: str
    build_s: dict[str, float]


@dataclass(frozen=True)
class StockImage:
    """The stock-like vLLM image, the venv a run mounts into it, and what building it took."""

    tag: str
    venv: Path
    build_s: float


def ours(docker_host: str) -> list[str]:
    """Names of the containers of ours on a host, running or not (`docker ps -a`)."""
    done = subprocess.run(
        [
            "docker",
            "--host",
            docker_host,
            "ps",
            "-a",
            "--filter",
            "label=stallkit=1",
            "--format",
            "{{.Names}}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.split()


def write_kit(
    path: Path,
    hosts: DockerHosts,
    duration_s: float = 3600,
    time_scale: float = 120.0,
    **engine: Any,
) -> Path:
    """The restore-stall kit for image arms here: host network, no GPUs, 120x, an hour."""
    import tomllib

    from stallkit.engine.launch.sim import dump_toml

    data = tomllib.loads((REPO / "kits" / "shipped" / "restore-stall.toml").read_text())
    data["name"] = "docker-test"
    data["engine"].update(
        gpus=[], network="host", time_scale=time_scale, startup_timeout_s=120.0, shm_size=""
    )
    data["engine"]["host"] = {"docker_host": hosts.a, "dcgm_url": "{engine_url}/dcgm/metrics"}
    data["engine"].update(engine)
    data["sim"]["time_scale"] = time_scale
    # an hour of engine time at 60-100K tokens: over HTTP the base livelock shows reliably
    data["load"].update(duration_s=duration_s, min_context=60000)
    path.write_text(dump_toml(data), encoding="utf-8")
    return path


def remove_ours(docker_host: str) -> None:
    """Remove every container of ours on a host (after a test, whatever it left)."""
    names = ours(docker_host)
    if names:
        subprocess.run(
            ["docker", "--host", docker_host, "rm", "--force", *names],
            capture_output=True,
            timeout=60,
            check=False,
        )


def run_kit(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """`kit ARGS` as a child; on a timeout it gets SIGTERM (and time to stop its engines)
    before it is killed, so a hung run does not leave containers behind."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "stallkit", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:  # our timeout, or the test's (pytest-timeout), or Ctrl-C
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    """Poll `predicate()` every 0.2 s until true; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
