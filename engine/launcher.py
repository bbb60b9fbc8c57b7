"""The launcher interface shared by every engine spec, and a process-group launcher.

A launcher starts an engine (or attaches to one), waits until it is healthy, tells the
URL, GPU source and log file, and stops it. `stop()` is idempotent and guaranteed: every
process group it started is gone afterwards, whatever happened before.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from engine.errors import EngineError
from engine.spec import EngineSpec

HEALTH_POLL_S = 0.2


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago (the engine binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def tail_lines(path: Path | None, count: int = 12) -> str:
    """The last `count` lines of a log file, for error messages."""
    if path is None or not path.exists():
        return ""
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 16384))
        lines = fh.read().decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-count:])


class Launcher(ABC):
    """Start, wait for, describe and stop one engine."""

    spec: EngineSpec
    log_path: Path | None = None

    @abstractmethod
    def start(self) -> None:
        """Begin starting the engine; returns without waiting for health."""

    @abstractmethod
    def wait_healthy(self, timeout_s: float) -> None:
        """Block until `/health` answers 200; raise EngineError if the engine dies or times out."""

    @property
    @abstractmethod
    def url(self) -> str:
        """Base URL of the engine's OpenAI-compatible server (no trailing slash)."""

    @property
    def gpu_source(self) -> str:
        """The monitor's GPU source for this engine (`none`, `nvml:0,1`, `dcgm:URL`, ...)."""
        return "none"

    @abstractmethod
    def stop(self) -> None:
        """Stop everything this launcher started. Idempotent; never raises."""

    def pids(self) -> list[int]:
        """PIDs of processes this launcher started and still holds (for tests and checks)."""
        return []

    def cpu_seconds(self) -> float | None:
        """The engine's cumulative CPU seconds (all its processes), None where unknown."""
        return None

    def __enter__(self) -> Launcher:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def wait_for_health(
    url: str,
    timeout_s: float,
    alive: Callable[[], str | None],
    log_path: Path | None,
    what: str,
) -> None:
    """Poll `url/health` until 200. `alive()` returns a reason string once the engine died."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while True:
            dead = alive()
            if dead is not None:
                tail = tail_lines(log_path)
                msg = f"{what} exited before it was healthy ({dead})"
                if tail:
                    msg += "; last log lines:\n" + tail
                raise EngineError(
                    msg, f"see {log_path}" if log_path else "check the engine's output"
                )
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{url}/health").status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise EngineError(
                    f"{what} was not healthy after {timeout_s:.0f} s",
                    "raise the kit's engine.startup_timeout_s, or read " + str(log_path),
                )
            time.sleep(HEALTH_POLL_S)


def kill_process_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the process group, wait up to grace_s, then SIGKILL it. Never raises."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = None
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
            # a stopped (SIGSTOPped) group must be continued to act on SIGTERM
            os.killpg(pgid, signal.SIGCONT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


class ProcessLauncher(Launcher):
    """Runs an engine as a child process in its own process group, logging to a file."""

    #: a subclass may set this to read the listening URL from the log (port 0 servers)
    url_pattern: re.Pattern[str] | None = None

    def __init__(
        self,
        spec: EngineSpec,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        url: str | None = None,
        grace_s: float = 10.0,
        cwd: Path | None = None,
    ) -> None:
        self.spec = spec
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self._url = url
        self.grace_s = grace_s
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self._proc is not None:
            return
        assert self.log_path is not None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.env,
                    cwd=self.cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                raise EngineError(
                    f"cannot start {self.argv[0]}: {exc.strerror}", "is it installed and on PATH?"
                ) from None

    def _dead_reason(self) -> str | None:
        if self._proc is None:
            return "not started"
        code = self._proc.poll()
        return None if code is None else f"exit code {code}"

    def _discover_url(self, deadline: float) -> str:
        assert self.url_pattern is not None
        while time.monotonic() < deadline:
            text = self.log_path.read_text("utf-8", "replace") if self.log_path else ""
            match = self.url_pattern.search(text)
            if match:
                return match.group(1).rstrip("/")
            dead = self._dead_reason()
            if dead is not None:
                raise EngineError(
                    f"{self.spec.raw} exited at start-up ({dead}); last log lines:\n"
                    + tail_lines(self.log_path),
                    f"see {self.log_path}",
                )
            time.sleep(0.05)
        raise EngineError(f"{self.spec.raw} did not report its URL", f"see {self.log_path}")

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        if self._url is None and self.url_pattern is not None:
            self._url = self._discover_url(deadline)
        wait_for_health(
            self.url,
            max(0.1, deadline - time.monotonic()),
            self._dead_reason,
            self.log_path,
            self.spec.raw,
        )

    @property
    def url(self) -> str:
        if self._url is None:
            raise EngineError(f"{self.spec.raw} has no URL yet", "call wait_healthy() first")
        return self._url

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The child process, for signals in tests (e.g. SIGSTOP of a real engine)."""
        return self._proc

    def stop(self) -> None:
        if self._proc is None:
            return
        kill_process_group(self._proc, self.grace_s)

    def pids(self) -> list[int]:
        return [self._proc.pid] if self._proc is not None and self._proc.poll() is None else []
