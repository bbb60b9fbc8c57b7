"""Ctrl-C and SIGTERM during `kit run`, `kit ab`, `kit load` and `kit monitor`, through real
processes: SIGTERM is Ctrl-C to every command.

Whenever SIGINT lands (engine start, mid-run, while the reports are written) the run exits
130 within seconds, stops its engine, and what it recorded is consistent: the agents' turns
and the monitor's timeline end together (a lost cancel once let the agents run on to the
arm's end after the monitor had stopped).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.machine import scaled
from tests.support import served_sim

pytestmark = pytest.mark.wallclock

REPO = Path(__file__).resolve().parents[3]
#: how long an interrupted run may take to exit (it still writes its summary and reports): a
#: few s on the idle reference machine; 15 s, stretched by this machine's speed and load
EXIT_WITHIN_S = scaled(15.0)


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _wait_for_turns(path: Path, count: int, deadline: float) -> None:
    while not (path.exists() and len(path.read_text().splitlines()) >= count):
        assert time.monotonic() < deadline, "no turns recorded"
        time.sleep(0.05)


def _ignore_ctrl_c() -> None:  # as a shell script's `kit run ... &` starts it
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    ("moment", "sig", "ignore_ctrl_c"),
    [("engine-start", signal.SIGINT, False), ("mid-run", signal.SIGINT, False),
     ("reports", signal.SIGINT, False), ("mid-run", signal.SIGTERM, False),
     ("mid-run", signal.SIGTERM, True)],
    ids=["engine-start", "mid-run", "reports", "mid-run-sigterm", "mid-run-sigterm-no-ctrl-c"],
)  # fmt: skip
def test_sigint_stops_the_run_at_once_and_keeps_it_consistent(
    moment: str, sig: signal.Signals, ignore_ctrl_c: bool, tmp_path: Path
) -> None:
    """A background job of a script ignores Ctrl-C: SIGTERM still stops it as Ctrl-C would."""
    out = tmp_path / "run"
    duration = "30" if moment == "reports" else "3600"  # 3600 engine s: two wall minutes
    args = ["run", "--engine", "sim:base", "--duration", duration, "--time-scale", "30",
            "--no-dashboard", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "stallkit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        preexec_fn=_ignore_ctrl_c if ignore_ctrl_c else None,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        if moment == "engine-start" and "starting sim:base" in line:
            break
        if moment == "mid-run" and "healthy" in line:
            _wait_for_turns(out / "turns.jsonl", 3, deadline)
            break
        if moment == "reports" and "duration after" in line:
            break
    else:
        pytest.fail(f"the run ended before {moment}")
    proc.send_signal(sig)
    sent = time.monotonic()
    stdout, stderr = proc.communicate(timeout=max(60, 2 * EXIT_WITHIN_S))
    took = time.monotonic() - sent
    assert "Traceback" not in stderr + stdout
    assert took < EXIT_WITHIN_S, f"{moment}: exited {took:.1f} s after {sig.name}"
    # after the arm's end the signal may come too late to interrupt anything: then it finished
    if not (moment == "reports" and proc.returncode == 0):
        assert proc.returncode == 130, (moment, stderr)
        assert "error: interrupted" in stderr
    # the engine is stopped: no process is left working in the run directory
    leftovers = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if str(out) in " ".join(p.info["cmdline"] or [])
    ]
    assert leftovers == []
    if not out.exists():  # interrupted before anything was recorded
        assert moment == "engine-start" and "before anything was recorded" in stderr
        return
    meta = json.loads((out / "meta.json").read_text())
    assert meta["end_reason"] in ("interrupted", "duration")
    turns = _lines(out / "turns.jsonl") if (out / "turns.jsonl").exists() else []
    if moment != "engine-start":
        timeline = _lines(out / "timeline.jsonl")
        last_turn = max(float(str(t["t_end"])) for t in turns)
        last_sample = max(float(str(x["t"])) for x in timeline)
        # both stop when the arm stops (their clocks start a moment apart)
        assert abs(last_turn - last_sample) < 2.0, (last_turn, last_sample)
        assert last_turn < float(duration) / 30 + 5


def test_sigterm_stops_load_and_monitor_as_ctrl_c_does(tmp_path: Path) -> None:
    """`kill`, a job's time limit or `timeout` send SIGTERM: what was recorded is kept and
    summed up, as on Ctrl-C, instead of the process dying with nothing written (exit 143)."""
    with served_sim("--time-scale", "20") as url:
        load_out, monitor_out = tmp_path / "load", tmp_path / "monitor"
        commands = {
            "load": ["load", url, "--agents", "2", "--min-context", "200",
                     "--max-context", "2000", "--out", str(load_out)],
            "monitor": ["monitor", url, "--interval", "0.2", "--no-dashboard",
                        "--out", str(monitor_out)],
        }  # fmt: skip
        procs = {
            name: subprocess.Popen(
                [sys.executable, "-m", "stallkit", *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
            )
            for name, args in commands.items()
        }
        _wait_for_turns(load_out / "turns.jsonl", 2, time.monotonic() + 60)
        _wait_for_turns(monitor_out / "timeline.jsonl", 3, time.monotonic() + 60)
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        done = {name: proc.communicate(timeout=30) for name, proc in procs.items()}
    for name, proc in procs.items():
        stdout, stderr = done[name]
        # the monitor's way to stop is Ctrl-C: a clean stop, with its summary
        assert proc.returncode == (0 if name == "monitor" else 130), (name, stderr)
        assert "Traceback" not in stdout + stderr
    assert "monitor: stopped at Ctrl-C: " in done["monitor"][0]
    summary = json.loads((load_out / "summary.json").read_text())
    assert summary["turns_ok"] >= 2 and "load summary" in done["load"][0]
    assert len(_lines(monitor_out / "timeline.jsonl")) >= 3


@pytest.mark.parametrize("cpus", [1, 2], ids=["serial", "worker-processes"])
def test_sigterm_stops_a_virtual_ab_as_ctrl_c_does(cpus: int, tmp_path: Path) -> None:
    """`kit ab` on the virtual clock runs its arms in process on one core and in worker
    processes on more: on either, SIGTERM ends the arms as interrupted, keeps what they
    recorded and the reports, and exits 130 (on one core it died with nothing written)."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < cpus:
        pytest.skip(f"needs {cpus} cores")
    out = tmp_path / "ab"
    # both arms the fix: neither stalls, so each runs until the signal
    args = ["ab", "--base", "sim:fix", "--fix", "sim:fix", "--seeds", "1",
            "--duration", "100000000", "--no-dashboard", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "stallkit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        preexec_fn=lambda: os.sched_setaffinity(0, usable[:cpus]),
    )
    _wait_for_turns(out / "base" / "turns.jsonl", 3, time.monotonic() + 60)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stdout + stderr
    assert "error: interrupted; partial results kept" in stderr
    arms = ["base", "fix"] if cpus > 1 else ["base"]  # one core: the fix arm never started
    for arm in arms:
        meta = json.loads((out / arm / "meta.json").read_text())
        assert meta["end_reason"] == "interrupted", (arm, meta["error"])
        assert (out / arm / "summary.json").exists()
    # the report of what ran (one arm's is run.md)
    assert (out / ("ab.md" if cpus > 1 else "run.md")).exists()
