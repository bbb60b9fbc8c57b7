"""`--on-stall CMD`: run a user's command once when a stall starts (optionally when it ends).

The command is an argument list (`shlex.split` of the flag, checked to exist before the
run starts); the verdict travels in environment variables, never in a shell string. It
runs in a background thread with a timeout so the monitor never waits on it; its output
goes to `on-stall/<onset>-<event>.log` in the run directory and each run's outcome (exit
code, timed out, could not start) is a line of `on-stall/runs.jsonl`. A failing or hanging
command is recorded, and the run goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stallkit.contract.files import ONSTALL_RUNS_FILE
from stallkit.contract.jsonl import append_jsonl
from stallkit.monitor.detect.events import MonitorEvent, StallEnded, StallStarted
from stallkit.monitor.errors import MonitorError


@dataclass(frozen=True)
class OnStallCommand:
    """A validated command line and when to run it."""

    argv: tuple[str, ...]
    timeout_s: float = 60.0
    on_end: bool = False

    @classmethod
    def parse(cls, text: str, timeout_s: float = 60.0, on_end: bool = False) -> OnStallCommand:
        """Split `text` like a shell would (no shell runs it) and check the program exists."""
        try:
            argv = shlex.split(text)
        except ValueError as exc:
            raise MonitorError(
                f"cannot parse --on-stall {text!r}: {exc}", hint="check its quotes"
            ) from None
        if not argv:
            raise MonitorError(
                "--on-stall is empty", hint="give a command, e.g. --on-stall ./page.sh"
            )
        if shutil.which(argv[0]) is None:
            raise MonitorError(
                f"--on-stall command not found: {argv[0]}",
                hint="give an executable path or a program on PATH",
            )
        if timeout_s <= 0:
            raise MonitorError("--on-stall-timeout must be positive", hint="seconds, e.g. 60")
        return cls(tuple(argv), timeout_s, on_end)


def stall_env(
    event: StallStarted | StallEnded,
    engine_url: str,
    run_dir: Path,
    arm: str,
    t0_unix: float,
    labels: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The verdict as environment variables (times: monitor seconds and Unix time); a fleet's
    engine also gets its Prometheus labels as a JSON object."""
    env = {
        "STALLKIT_EVENT": "start" if isinstance(event, StallStarted) else "end",
        "STALLKIT_STALL_KIND": event.kind,
        "STALLKIT_STALL_ONSET_S": f"{event.onset:.3f}",
        "STALLKIT_STALL_ONSET_UNIX": f"{t0_unix + event.onset:.3f}",
        "STALLKIT_ENGINE_URL": engine_url,
        "STALLKIT_RUN_DIR": str(run_dir),
        "STALLKIT_ARM": arm,
        "STALLKIT_FORENSICS_DIR": str(run_dir / "forensics" / onset_name(event.onset)),
    }
    if labels is not None:
        env["STALLKIT_ENGINE_LABELS"] = json.dumps(dict(labels), sort_keys=True)
    if isinstance(event, StallEnded):
        env["STALLKIT_STALL_DURATION_S"] = f"{event.duration_s:.3f}"
    else:
        env["STALLKIT_GPU_CHECKED"] = "1" if event.gpu_checked else "0"
    return env


def onset_name(onset_s: float) -> str:
    """The directory name of a stall: its onset in monitor milliseconds, zero-padded."""
    return f"{round(onset_s * 1000):010d}ms"


class OnStallRunner:
    """A monitor-event consumer that starts the command on stall start (and end)."""

    def __init__(
        self,
        command: OnStallCommand,
        run_dir: Path,
        engine_url: str,
        arm: str = "",
        *,
        labels: Mapping[str, str] | None = None,
        t0_unix: float | None = None,
    ) -> None:
        self.command = command
        self.dir = run_dir / "on-stall"
        self._run_dir = run_dir
        self._url = engine_url
        self._arm = arm
        self._labels = labels
        self._t0_unix = time.time() if t0_unix is None else t0_unix
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def handle(self, event: MonitorEvent) -> None:
        """Start the command for a stall start, or an end when asked to."""
        if isinstance(event, StallStarted) or (
            isinstance(event, StallEnded) and self.command.on_end
        ):
            env = stall_env(event, self._url, self._run_dir, self._arm, self._t0_unix, self._labels)
            name = f"{onset_name(event.onset)}-{env['STALLKIT_EVENT']}"
            thread = threading.Thread(target=self._run, args=(name, env), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run(self, name: str, env: dict[str, str]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        log = self.dir / f"{name}.log"
        started = time.monotonic()
        outcome: dict[str, object] = {"name": name, "argv": list(self.command.argv)}
        outcome["event"] = env["STALLKIT_EVENT"]
        try:
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    self.command.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **env},
                    start_new_session=True,
                )
                try:
                    outcome["exit_code"] = proc.wait(timeout=self.command.timeout_s)
                    outcome["timed_out"] = False
                except subprocess.TimeoutExpired:
                    # the command's own session: its children go with it
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    outcome["exit_code"] = None
                    outcome["timed_out"] = True
        except OSError as exc:
            outcome["error"] = f"{type(exc).__name__}: {exc}"
        outcome["wall_s"] = round(time.monotonic() - started, 3)
        outcome["log"] = log.name
        with self._lock:
            append_jsonl(self.dir / ONSTALL_RUNS_FILE, outcome)

    def close(self, wait_s: float | None = None) -> None:
        """Wait for commands still running (each ends by its own timeout at the latest)."""
        limit = self.command.timeout_s + 5 if wait_s is None else wait_s
        deadline = time.monotonic() + limit
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
