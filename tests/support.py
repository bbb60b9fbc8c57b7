"""Helpers the test packages share: the checkout's root and `kit` run as a real child process."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


def kit(*args: str, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`kit ARGS` in a child process (`python -m kits`), its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "kits", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        check=False,
    )


@contextlib.contextmanager
def served_sim(*args: str) -> Iterator[str]:
    """`kit sim serve --port 0 ARGS` in its own process; yields its URL, stops it after."""
    server = subprocess.Popen(
        [sys.executable, "-m", "kits", "sim", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )
    assert server.stdout is not None
    try:
        line = server.stdout.readline()
        assert "listening on" in line, line
        yield line.split()[-1]
    finally:
        server.terminate()
        server.wait(10)
        server.stdout.close()


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single line a user error prints on stderr (asserts exit 2 and exactly one line)."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, done.stderr
    return lines[0]


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie has ended: only its exit status is left)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def still_alive(pids: list[int]) -> list[int]:
    """Those of `pids` that still run."""
    return [pid for pid in pids if alive(pid)]


def descendants(pid: int) -> list[int]:
    """Every process below `pid` now (none if it is gone)."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
