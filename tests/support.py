"""Helpers the test packages share: the checkout's root, `kit` run as a real child process,
and what a failed `kit ab` run left, written out for the assertion message."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from tests.machine import scaled

REPO = Path(__file__).resolve().parents[1]


def kit(
    *args: str, cwd: Path = REPO, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`kit ARGS` in a child process (`python -m stallkit`), its output captured as text;
    `env` adds to (or overrides) this process's environment, e.g. COLUMNS."""
    return subprocess.run(
        [sys.executable, "-m", "stallkit", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        check=False,
        env={**os.environ, **(env or {})},
    )


def kit_process(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`kit ARGS` started in a child process, its stdout and stderr piped as text."""
    return subprocess.Popen(
        [sys.executable, "-m", "stallkit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


@contextlib.contextmanager
def served_sim(*args: str, kill_on_hang: bool = False) -> Iterator[str]:
    """`kit sim serve --port 0 ARGS` in its own process; yields its URL, stops it after.
    A shutdown still waiting after 10 s (well under 1 s on the idle reference machine;
    stretched by this machine's speed and load) fails the test, unless `kill_on_hang` (a
    frozen engine never ends the streams another tool left open, so its graceful shutdown
    waits)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "stallkit", "sim", "serve", "--port", "0", *args],
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
        try:
            server.wait(scaled(10) if not kill_on_hang else 10)
        except subprocess.TimeoutExpired:
            if not kill_on_hang:
                raise
            server.kill()
            server.wait(scaled(5))
        server.stdout.close()


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single line a user error prints on stderr (asserts exit 2 and exactly one line)."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, done.stderr
    return lines[0]


def unwrapped(text: str, width: int = 80) -> str:
    """`text`'s lines joined by one space, after asserting that none is wider than `width`:
    a phrase found in the result was wrapped between its words, never inside one (a word cut
    in two reads `DC GM` there)."""
    lines = text.splitlines()
    wide = [line for line in lines if len(line) > width]
    assert not wide, wide
    return " ".join(" ".join(line.split()) for line in lines if line.strip())


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


def _json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(errors="replace").splitlines() if line]


def _quiet_spells(samples: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(start, end) of each span with work pending and no new token, longest first."""
    spells: list[tuple[float, float]] = []
    start: float | None = None
    prev: dict[str, Any] | None = None
    for s in samples:
        pending = (s.get("running") or 0) > 0 or (s.get("waiting") or 0) > 0
        quiet = prev is not None and pending and s.get("gen_tokens") == prev.get("gen_tokens")
        if quiet and start is None:
            start = prev["t"] if prev is not None else s["t"]
        elif not quiet and start is not None:
            spells.append((start, s["t"]))
            start = None
        prev = s
    if start is not None and prev is not None:
        spells.append((start, prev["t"]))
    return sorted(spells, key=lambda span: span[0] - span[1])


def _sample_row(s: dict[str, Any]) -> str:
    keys = ("running", "waiting", "waiting_capacity", "kv_usage", "gen_tokens", "preemptions")
    return f"t={s['t']:.1f} " + " ".join(f"{k}={s.get(k)}" for k in keys)


def _arm_diagnosis(arm_dir: Path) -> list[str]:
    lines = [f"--- arm {arm_dir.name}"]
    meta_path = arm_dir / "meta.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        fields = ("end_reason", "error", "wall_s", "started_at", "finished_at")
        lines.append("meta: " + ", ".join(f"{k}={meta.get(k)!r}" for k in fields))
    events = _json_lines(arm_dir / "timeline.jsonl")
    samples = [e for e in events if e.get("type") == "sample"]
    for event in events:
        if event.get("type") in ("stall_started", "stall_ended", "stop_requested", "down"):
            lines.append(f"timeline: {event}")
            onset = event.get("onset", event["t"])
            if event.get("type") == "stall_started":
                lines += [
                    "  " + _sample_row(s) for s in samples if onset - 3 <= s["t"] <= event["t"] + 1
                ]
    spells = _quiet_spells(samples)
    longest = ", ".join(f"{a:.1f}-{b:.1f} s" for a, b in spells[:3]) or "none"
    lines.append(f"{len(samples)} samples; longest spells pending with no new token: {longest}")
    turns = _json_lines(arm_dir / "turns.jsonl")
    outcomes = Counter(t.get("outcome") for t in turns)
    ttfts = sorted(t["ttft_s"] for t in turns if t.get("ttft_s") is not None)
    slowest = f"{ttfts[-1]:.1f} s" if ttfts else "n/a"
    lines.append(f"turns: {dict(outcomes)}; slowest first token {slowest}")
    for t in turns:
        if t.get("outcome") not in ("ok", "aborted"):
            keys = (
                "agent",
                "turn",
                "outcome",
                "error",
                "t_start",
                "ttft_s",
                "expected_prompt_tokens",
            )
            lines.append("  failed turn: " + ", ".join(f"{k}={t.get(k)!r}" for k in keys))
    bundles = (
        sorted(p.name for p in (arm_dir / "forensics").glob("*"))
        if (arm_dir / "forensics").is_dir()
        else []
    )
    if bundles:
        lines.append(f"forensics bundles: {bundles}")
    log = arm_dir / "engine.log"
    if log.is_file():
        text = log.read_text(errors="replace").splitlines()
        bad = [line for line in text if "Traceback" in line or "ERROR" in line][:10]
        lines += ["engine.log error lines:", *bad] if bad else []
        lines += ["engine.log tail:", *text[-12:]]
    return lines


def ab_diagnosis(out_dir: Path, output: str = "") -> str:
    """What a failed `kit ab` run left, for the assertion message: the CLI's output, each
    arm's end, stall events and the samples around their onsets, the longest quiet spells,
    failed turns with their errors, and the engine log's errors and tail, with the machine's
    load. Never raises: a diagnosis must not hide the failure it describes."""
    lines = [f"machine: {os.cpu_count()} cores, load average {os.getloadavg()}"]
    if output:
        lines += ["kit output (tail):", *output.splitlines()[-40:]]
    for arm_dir in sorted(p for p in out_dir.glob("*") if (p / "meta.json").is_file()):
        try:
            lines += _arm_diagnosis(arm_dir)
        except Exception as exc:  # the diagnosis is best effort
            lines.append(f"--- arm {arm_dir.name}: diagnosis failed: {exc!r}")
    return "\n".join(lines)
