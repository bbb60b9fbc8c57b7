"""A forensics bundle at stall onset: what a developer needs to find where the engine is stuck.

`ForensicsCollector` consumes monitor events, keeps the detector's inputs of the last
`window_s` seconds, and when a stall starts writes `forensics/<onset>/` in the run
directory from a background thread (the monitor never waits): `metrics.txt` (the raw
/metrics page), `engine-log-tail.txt`, `inputs.jsonl` (the detector's inputs over the last
`window_s`), `verdict.json`, and by engine kind:

- local processes (real vLLM, the patched engine, the simulator's child): `py-spy dump` of
  every Python process of the engine plus a short `py-spy record` of where they spend time
  (`stacks/`); py-spy needs ptrace permission (root, or CAP_SYS_PTRACE with
  kernel.yama.ptrace_scope <= 1): without it the refusal is recorded in the manifest and
  the rest of the bundle is still written;
- a docker container: the same through `docker exec` when the image has py-spy, else the
  container's process list and CPU (`docker top`, `docker stats`);
- the simulator: its scheduler state from `GET /debug/state`;
- a simulator arm on the virtual clock: its scheduler state read in process, the bundle
  written at once (no thread), so it is as deterministic as the arm.

`manifest.json` lists the files, the errors, the hottest stack (`top_frames`) and the
busiest functions with their share of samples (`hot_leaves`), and for the simulator its
scheduler state in one line (`scheduler`), which the A/B report quotes. Every command is an
argument list with a timeout.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx
from pydantic import ValidationError

from stallkit.contract.errors import failure_words, validation_message
from stallkit.contract.files import FORENSICS_INPUTS_FILE
from stallkit.contract.forensics import MANIFEST_FILE, BundleManifest
from stallkit.contract.jsonl import jsonl_text, write_json
from stallkit.contract.scheduler_state import SIM_STATE_FILE, SimState
from stallkit.contract.timeline import TimelineLine
from stallkit.monitor.detect.events import Down, GpuReading, MonitorEvent, Sample, StallStarted
from stallkit.monitor.live.timeline import event_line
from stallkit.monitor.on_stall.command import onset_name
from stallkit.monitor.signals.scrape import metrics_url

TargetKind = Literal["local", "docker", "sim", "virtual", "remote"]
PTRACE_HINT = (
    "py-spy needs ptrace permission: run as root, or grant CAP_SYS_PTRACE and set "
    "kernel.yama.ptrace_scope to 0 or 1"
)


@dataclass(frozen=True)
class EngineTarget:
    """How to reach the engine's processes: its kind, its PIDs, container and log."""

    kind: TargetKind
    pids: Callable[[], list[int]] = field(default=lambda: [])
    container: str | None = None
    log_path: Path | None = None
    #: a virtual-clock simulator's scheduler state, read in process (what /debug/state serves)
    state: Callable[[], SimState] | None = None


def py_spy() -> str | None:
    """The py-spy executable: on PATH, or beside this Python (a virtual environment)."""
    found = shutil.which("py-spy")
    if found:
        return found
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else None


def python_pids(roots: Sequence[int]) -> list[int]:
    """The roots and their descendants that run a Python interpreter."""
    import psutil

    out: list[int] = []
    for root in roots:
        try:
            procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
        except psutil.Error:
            continue
        for proc in procs:
            try:
                exe = Path(proc.exe()).name
                argv0 = Path((proc.cmdline() or [""])[0]).name
            except psutil.Error:
                continue
            if ("python" in exe or "python" in argv0) and proc.pid not in out:
                out.append(proc.pid)
    return out


def docker_commands(container: str, has_py_spy: bool) -> dict[str, list[str]]:
    """The docker argument lists of a container's bundle (file name -> argv)."""
    if has_py_spy:
        return {
            "stacks/container-dump.txt": ["docker", "exec", container, "py-spy", "dump", "--pid", "1"],
            "stacks/container-ps.txt": ["docker", "top", container, "-eo", "pid,pcpu,pmem,args"],
        }  # fmt: skip
    return {
        "stacks/container-ps.txt": ["docker", "top", container, "-eo", "pid,pcpu,pmem,args"],
        "stacks/container-stats.txt": ["docker", "stats", "--no-stream", container],
    }


def _busy_stacks(folded: str) -> dict[str, int]:
    counts: collections.Counter[str] = collections.Counter()
    for line in folded.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[stack] += int(count)
    # a stack that prefixes another sampled one is an event loop waiting for its coroutines
    return {s: n for s, n in counts.items() if not any(o.startswith(s + ";") for o in counts)}


def hot_leaves(folded: str, limit: int = 5) -> list[str]:
    """The innermost functions with the most samples, with their share of the busy samples."""
    busy = _busy_stacks(folded)
    total = sum(busy.values())
    leaves: collections.Counter[str] = collections.Counter()
    for stack, n in busy.items():
        leaves[re.sub(r":\d+\)$", ")", stack.rsplit(";", 1)[-1])] += n  # the function, any line
    return [f"{leaf} {100 * n / total:.0f}%" for leaf, n in leaves.most_common(limit)]


def hottest_frames(folded: str, limit: int = 12) -> list[str]:
    """The innermost frames where the engine spends its time, from py-spy's raw output.

    A stack that is a strict prefix of another sampled stack is an event loop waiting (its
    coroutines' frames appear only while they run), so it is left out when others exist.
    Of the rest, the leaf function with the most samples wins, and its most sampled stack
    is returned innermost first.
    """
    busy = _busy_stacks(folded)
    if not busy:
        return []
    leaves: collections.Counter[str] = collections.Counter()
    for stack, n in busy.items():
        leaves[stack.rsplit(";", 1)[-1]] += n
    leaf = leaves.most_common(1)[0][0]
    stack = max((s for s in busy if s.rsplit(";", 1)[-1] == leaf), key=lambda s: busy[s])
    return list(reversed(stack.split(";")))[:limit]


def _tail(path: Path | None, lines: int) -> str:
    if path is None or not path.exists():
        return ""
    with path.open("rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - 256 * 1024))
        data = fh.read().decode("utf-8", "replace")
    return "\n".join(data.splitlines()[-lines:]) + "\n"


class _Bundle:
    """One stall's bundle, written by one thread."""

    def __init__(self, out: Path, errors: list[str]) -> None:
        self.out = out
        self.errors = errors
        self.files: list[str] = []

    def write(self, name: str, text: str) -> None:
        path = self.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self.files.append(name)

    def command(
        self,
        name: str,
        argv: list[str],
        timeout_s: float,
        attempts: int = 1,
        fallback: list[str] | None = None,
    ) -> str | None:
        """Run `argv` (up to `attempts` times, then `fallback` once) and keep its output."""
        tries = [argv] * attempts + ([fallback] if fallback is not None else [])
        for attempt, cmd in enumerate(tries):
            try:
                done = subprocess.run(
                    cmd,
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                    stdin=subprocess.DEVNULL,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                self.errors.append(f"{cmd[0]} {cmd[1]}: {type(exc).__name__}: {exc}")
                return None
            refused = "ermission" in (done.stderr or "")
            if done.returncode == 0 or refused or attempt == len(tries) - 1:
                break
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().splitlines()
            self.errors.append(f"{' '.join(argv[:3])}: exit {done.returncode}: {message[-1:]}")
            return None
        self.write(name, done.stdout)
        return done.stdout


class ForensicsCollector:
    """A monitor-event consumer that writes a bundle when a stall starts."""

    def __init__(
        self,
        run_dir: Path,
        engine_url: str,
        target: EngineTarget,
        window_s: float,
        *,
        record_s: float = 1.0,
        log_lines: int = 200,
        background: bool = True,
    ) -> None:
        self.root = run_dir / "forensics"
        self._url = engine_url.rstrip("/")
        self._target = target
        self._window_s = window_s
        self._record_s = record_s
        self._log_lines = log_lines
        self._background = background
        self._recent: collections.deque[Sample | Down | GpuReading] = collections.deque()
        self._threads: list[threading.Thread] = []

    def handle(self, event: MonitorEvent) -> None:
        """Keep the recent inputs; on a stall start, collect its bundle in the background."""
        # the events themselves: made into timeline lines only for a bundle (a virtual arm
        # hands over thousands of samples a run, and most never go into a bundle)
        if isinstance(event, (Sample, Down)) or (
            isinstance(event, GpuReading) and event.error is None
        ):
            self._recent.append(event)
            while self._recent and self._recent[0].t < event.t - self._window_s - 1.0:
                self._recent.popleft()
        if isinstance(event, StallStarted):
            lines = [line for e in self._recent if (line := event_line(e)) is not None]
            inputs = [line for line in lines if line.t >= event.t - self._window_s]
            if not self._background:
                self.collect(event, inputs)
                return
            thread = threading.Thread(target=self.collect, args=(event, inputs), daemon=True)
            self._threads.append(thread)
            thread.start()

    def collect(self, event: StallStarted, inputs: Sequence[TimelineLine]) -> Path:
        """Write the bundle of `event` (blocking); returns its directory."""
        out = self.root / onset_name(event.onset)
        out.mkdir(parents=True, exist_ok=True)
        errors: list[str] = []
        bundle = _Bundle(out, errors)
        verdict = {"t": event.t, "onset": event.onset, "kind": event.kind}
        bundle.write("verdict.json", json.dumps(verdict | {"gpu_checked": event.gpu_checked}))
        bundle.write(FORENSICS_INPUTS_FILE, jsonl_text(inputs))
        if self._url:
            self._fetch(bundle, metrics_url(self._url), "metrics.txt")
        if self._target.log_path is not None:
            bundle.write("engine-log-tail.txt", _tail(self._target.log_path, self._log_lines))
        state = None
        if self._target.state is not None:
            state = self._target.state()
            bundle.write(SIM_STATE_FILE, state.model_dump_json(indent=1) + "\n")
        elif self._target.kind == "sim":
            text = self._fetch(bundle, f"{self._url}/debug/state", SIM_STATE_FILE)
            try:
                state = SimState.model_validate_json(text) if text is not None else None
            except ValidationError as exc:
                problem = validation_message(exc)
                bundle.errors.append(f"{SIM_STATE_FILE}: not the simulator's state: {problem}")
        top: tuple[list[str], list[str]] = ([], [])
        if self._target.kind in ("local", "sim"):
            top = self._stacks(bundle)
        elif self._target.kind == "docker" and self._target.container:
            self._docker(bundle, self._target.container)
        manifest = BundleManifest(
            **verdict,
            files=sorted(bundle.files),
            errors=errors,
            top_frames=top[0],
            hot_leaves=top[1],
            scheduler=state.one_line() if state is not None else None,
        )
        write_json(out / MANIFEST_FILE, manifest)
        return out

    def _fetch(self, bundle: _Bundle, url: str, name: str) -> str | None:
        try:
            response = httpx.get(url, timeout=5.0)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            bundle.errors.append(failure_words(f"GET {url}", exc))
            return None
        bundle.write(name, response.text)
        return response.text

    def _stacks(self, bundle: _Bundle) -> tuple[list[str], list[str]]:
        """Dump and profile each Python process; the first profile's frames and leaves."""
        spy = py_spy()
        pids = python_pids(self._target.pids())
        if spy is None:
            bundle.errors.append("py-spy not found (pip install py-spy): no stack dumps")
            return [], []
        if not pids:
            bundle.errors.append("no live Python process of the engine to dump")
        top: tuple[list[str], list[str]] = ([], [])
        for pid in pids:
            dump = [spy, "dump", "--pid", str(pid), "--nonblocking"]
            # a non-blocking read of a running process can meet a stack mid-change: try again,
            # then once pausing the process for the read (a few ms of a stalled engine)
            got = bundle.command(
                f"stacks/{pid}-dump.txt", dump, timeout_s=20, attempts=3, fallback=dump[:-1]
            )
            if got is None and bundle.errors and "ermission" in bundle.errors[-1]:
                bundle.errors.append(PTRACE_HINT)
                continue
            folded = bundle.out / "stacks" / f"{pid}.folded"
            record = [spy, "record", "--pid", str(pid), "--duration", f"{self._record_s:g}"]
            record += ["--rate", "200", "--format", "raw", "--nonblocking", "-o", str(folded)]
            blocking = [a for a in record if a != "--nonblocking"]
            ran = bundle.command(
                f"stacks/{pid}-record.txt", record, self._record_s + 20, 3, fallback=blocking
            )
            if ran is not None and folded.exists():
                bundle.files.append(f"stacks/{pid}.folded")
                text = folded.read_text(encoding="utf-8")
                if not top[0]:
                    top = (hottest_frames(text), hot_leaves(text))
        return top

    def _docker(self, bundle: _Bundle, container: str) -> None:
        try:
            probe = subprocess.run(
                ["docker", "exec", container, "which", "py-spy"],
                capture_output=True,
                timeout=20,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            bundle.errors.append(f"docker exec: {type(exc).__name__}: {exc}")
            return
        for name, argv in docker_commands(container, probe.returncode == 0).items():
            bundle.command(name, argv, timeout_s=30)

    def close(self, wait_s: float = 30.0) -> None:
        """Wait for bundles still being written."""
        for thread in self._threads:
            thread.join(wait_s)
