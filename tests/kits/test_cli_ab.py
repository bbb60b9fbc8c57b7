"""`kit ab`, `kit run` and `kit report` end to end on the simulator, through real processes.

Slow tier: each test runs engines. The A/B test raises the time scale so an hour of the
restore-stall kit takes well under a minute of wall time per arm.
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
from typer.testing import CliRunner

from kits.cli import app

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _kit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kits", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def test_ab_on_the_wall_clock_writes_the_reports_and_the_fix_never_stalls(tmp_path: Path) -> None:
    """Over HTTP, only what does not depend on request timing is asserted.

    Whether and when the base scheduler livelocks over real sockets depends on the timing of
    the requests, which a loaded machine shifts; the livelock itself is asserted on the
    deterministic path (tests/engine/test_sim_workload.py, the pure core on its own clock).
    Here: both arms run, the reports are written and re-made offline, the fix (which cannot
    livelock) never stalls, and a base stall, when there is one, is the spinning kind that
    stops the run and is flagged in the table.
    """
    out = tmp_path / "ab"
    done = _kit(
        "ab", "--duration", "3600", "--time-scale", "120", "--min-context", "60000",
        "--no-dashboard", "--out", str(out), timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("ab.md", "ab.json", "timeline.png"):
        assert (out / name).stat().st_size > 0, name
    data = json.loads((out / "ab.json").read_text())
    base, fix = data["arms"]["base"], data["arms"]["fix"]
    assert base["spec"] == "sim:base" and fix["spec"] == "sim:fix"
    assert fix["stalls"] == []
    assert fix["end_reason"] == "duration" and fix["turns"] > 0
    assert all(s["kind"] == "spinning" for s in base["stalls"]), base["stalls"]
    if base["stalls"]:
        assert any(s["stopped_run"] for s in base["stalls"]), base["stalls"]
        assert base["end_reason"] == "stall_stop"
        assert "stopped by the monitor" in (out / "ab.md").read_text()
    md = (out / "ab.md").read_text()
    for row in (
        "stalls",
        "turns / errors / timeouts",
        "max KV usage",
        "preemptions",
        "restores recomputed (log)",
        "tracebacks (log)",
        "decode tok/s",
        "prompt tokens from cache",
        "run length",
    ):
        assert f"| {row}" in md, row
    assert "A/B: restore-stall" in done.stdout  # the table was printed
    # reports are re-made offline from the saved directories alone
    (out / "ab.md").unlink()
    again = CliRunner().invoke(app, ["report", str(out)])
    assert again.exit_code == 0, again.output
    assert (out / "ab.md").read_text() == md


def _descendants(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_ctrl_c_during_run_keeps_records_and_stops_everything(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kits",
            "run",
            "--engine",
            "sim:fix",
            "--time-scale",
            "20",
            "--agents",
            "4",
            "--no-dashboard",
            "--out",
            str(out),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    turns = out / "turns.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if turns.exists() and len(turns.read_text().splitlines()) >= 3:
            break
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.2)
    children = _descendants(proc.pid)
    assert children, "the simulator should run as a child"
    before = turns.read_text().splitlines()[:3]
    os.kill(proc.pid, signal.SIGINT)
    started = time.monotonic()
    output, _ = proc.communicate(timeout=30)
    assert time.monotonic() - started < 15, "Ctrl-C must end the run within seconds"
    assert proc.returncode == 130, output[-2000:]
    assert "interrupted" in output
    time.sleep(0.5)
    assert _alive(children) == []
    lines = turns.read_text().splitlines()
    assert lines[:3] == before
    records = [json.loads(line) for line in lines]
    assert any(r["outcome"] == "ok" for r in records)
    assert all(json.loads(line) for line in (out / "timeline.jsonl").read_text().splitlines())
    meta = json.loads((out / "meta.json").read_text())
    assert meta["end_reason"] == "interrupted"
    summary = json.loads((out / "summary.json").read_text())
    # the partial summary is made from exactly the records on disk
    assert summary["requests"] == len(records) and summary["turns_ok"] >= 1


def test_bad_inputs_are_one_line_errors_with_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    cases = [
        (["ab", "--base", "nonsense", "--out", str(tmp_path / "a")], "unknown engine spec"),
        (["ab", "--kit", "nope", "--out", str(tmp_path / "b")], "no kit named"),
        (
            [
                "ab",
                "--base",
                "reg/x:1",
                "--fix",
                "reg/y:1",
                "--parallel",
                "--out",
                str(tmp_path / "c"),
            ],
            "both use GPU",
        ),
        (
            [
                "run",
                "--engine",
                "sim:base",
                "--overlay",
                f"{tmp_path}:/opt/x",
                "--out",
                str(tmp_path / "d"),
            ],
            "docker image arms only",
        ),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, result.output
        assert "Traceback" not in result.output
    assert not any((tmp_path / n).exists() for n in "abcd"), "nothing may start or be written"


def test_unreachable_url_arm_fails_cleanly(tmp_path: Path) -> None:
    out = tmp_path / "u"
    result = CliRunner().invoke(
        app, ["run", "--engine", "url:http://127.0.0.1:9", "--no-dashboard", "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    # nothing was recorded (no engine log, no turn, no sample), so nothing is left behind
    assert not out.exists()


def test_an_engine_that_dies_mid_run_ends_it_as_such_with_its_last_log_lines(
    tmp_path: Path,
) -> None:
    out = tmp_path / "died"
    argv = [sys.executable, "-m", "kits", "run", "--engine", "sim:fix", "--time-scale", "20"]
    argv += ["--agents", "4", "--no-dashboard", "--out", str(out)]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    turns = out / "turns.jsonl"
    deadline = time.monotonic() + 120
    while not (turns.exists() and turns.read_text().strip()):
        assert time.monotonic() < deadline and proc.poll() is None, "no turn was recorded"
        time.sleep(0.2)
    engine = _descendants(proc.pid)
    assert engine, "the simulator should run as a child"
    for pid in engine:
        os.kill(pid, signal.SIGKILL)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, output[-2000:]
    assert "the engine died during the run" in output and "Traceback" not in output
    meta = json.loads((out / "meta.json").read_text())
    assert meta["end_reason"] == "engine_died"
    assert "died during the run (exit code -9)" in meta["error"]
    assert "last log lines" in meta["error"]
    # what was recorded before it died is kept
    assert json.loads((out / "summary.json").read_text())["requests"] >= 1
