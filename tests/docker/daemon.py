"""Start and stop private docker daemons for the docker tests (and for CI, as a script).

Each daemon has its own socket, data root, exec root and pid file, no bridge and no
iptables rules; containers use the host network, so every byte stays on loopback.

    python tests/docker/daemon.py start DIR   # prints the DOCKER_HOST URL
    python tests/docker/daemon.py stop DIR    # stops it and deletes DIR
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT_S = 40.0
#: daemons this process started, reaped on stop (an unreaped child warns when collected)
_CHILDREN: dict[Path, subprocess.Popen[bytes]] = {}


class DaemonUnavailable(RuntimeError):
    """No docker daemon could start here (the reason is the message)."""


def host_url(base: Path) -> str:
    """The DOCKER_HOST URL of the daemon rooted at `base`."""
    return f"unix://{base}/docker.sock"


def answers(docker_host: str, timeout_s: float = 10.0) -> bool:
    """Whether a daemon answers at `docker_host`."""
    try:
        done = subprocess.run(
            ["docker", "--host", docker_host, "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def start(base: Path) -> str:
    """Start a daemon rooted at `base` (a short path: unix sockets live under it)."""
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        raise DaemonUnavailable("dockerd/docker not installed (apt-get install docker.io)")
    if os.geteuid() != 0:
        raise DaemonUnavailable("dockerd needs root")
    base.mkdir(parents=True, exist_ok=True)
    url = host_url(base)
    argv = [
        "dockerd",
        "--data-root", str(base / "data"),
        "--exec-root", str(base / "exec"),
        "--pidfile", str(base / "dockerd.pid"),
        "--host", url,
        "--bridge=none",
        "--iptables=false",
        "--ip-masq=false",
    ]  # fmt: skip
    with (base / "dockerd.log").open("ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    _CHILDREN[base] = proc
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if answers(url, timeout_s=5):
            return url
        time.sleep(0.3)
    stop(base)
    tail = (base / "dockerd.log").read_text("utf-8", "replace").strip().splitlines()[-2:]
    raise DaemonUnavailable("dockerd did not start: " + " / ".join(tail))


def stop(base: Path) -> None:
    """Remove the daemon's containers, then stop it (SIGTERM, then SIGKILL after 20 s)."""
    url = host_url(base)
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        ids = subprocess.run(
            ["docker", "--host", url, "ps", "-aq"], capture_output=True, text=True, timeout=20
        ).stdout.split()
        if ids:
            subprocess.run(["docker", "--host", url, "rm", "-f", *ids], timeout=60, check=False)
    child = _CHILDREN.pop(base, None)
    if child is not None:
        child.terminate()
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)
    else:
        with contextlib.suppress(OSError, ValueError):
            _terminate(int((base / "dockerd.pid").read_text().strip()))
    # the daemon leaves its network namespace mounted under the exec root
    netns = base / "exec" / "netns" / "default"
    if os.path.ismount(netns):
        subprocess.run(["umount", str(netns)], capture_output=True, timeout=30, check=False)


def remove(base: Path) -> None:
    """Stop the daemon rooted at `base` and delete its files (images, containers, sockets)."""
    stop(base)
    shutil.rmtree(base, ignore_errors=True)


def _terminate(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: daemon.py start|stop DIR", file=sys.stderr)
        return 2
    base = Path(argv[1]).resolve()
    if argv[0] == "stop":
        remove(base)
        return 0
    try:
        print(start(base))
    except DaemonUnavailable as exc:
        print(f"daemon.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
