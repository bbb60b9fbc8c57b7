"""`kit ab`, `kit run` and `kit report` end to end on the simulator, through real processes.

Slow tier: each test runs engines. Stalls are asserted on the virtual clock only, where the
outcome is deterministic; wall-clock (HTTP) tests assert what does not depend on timing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stallkit.kits.cli import app
from tests.machine import scaled
from tests.support import descendants, kit, still_alive

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]


def _kit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return kit(*args, timeout=timeout)


def test_ab_on_the_virtual_clock_reproduces_the_stall_and_the_fix(tmp_path: Path) -> None:
    """Deterministic: seed 8 livelocks base at about 900 engine s, whatever the machine's load."""
    out = tmp_path / "ab"
    done = _kit("ab", "--seeds", "8,9", "--duration", "1200", "--no-dashboard", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("ab.md", "ab.json", "timeline.png"):
        assert (out / name).stat().st_size > 0, name
    data = json.loads((out / "ab.json").read_text())
    base, fix = data["arms"]["base"], data["arms"]["fix"]
    assert base["spec"] == "sim:base" and fix["spec"] == "sim:fix"
    assert base["clock"] == fix["clock"] == "virtual"
    rows = {r["seed"]: r for r in base["seeds"]}
    assert rows[8]["stalled"] and rows[8]["stopped_run"] and rows[8]["kind"] == "spinning"
    assert 800 < rows[8]["onset_s"] < 1000
    assert not any(r["stalled"] for r in fix["seeds"])
    assert data["verdict"]["fix_stalled"] == 0 and data["verdict"]["seeds"] == 2
    # a stuck engine never polls its restores again; the fixed one recomputes them after the wait
    assert fix["log_counts"]["restores_recomputed"] > base["log_counts"]["restores_recomputed"]
    assert fix["duration_s"] == pytest.approx(2 * 1200, abs=5)  # engine seconds, two seeds
    md = (out / "ab.md").read_text()
    for row in (
        "stalled seeds",
        "first stall onset",
        "verdict",
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
    assert "stopped by the monitor" in md  # the base arm's figures are flagged
    assert "## Per seed" in md
    # each stall links its seed's forensics bundle, and quotes the stuck scheduler's state
    bundles = re.findall(r"^- base: spinning stall at \d+ s: \[([^\]]+)\]\(\1/\) — (.*)$", md, re.M)
    assert [path for path, _ in bundles] == [
        f"base/seed-8/forensics/{p.name}" for p in (out / "base" / "seed-8" / "forensics").iterdir()
    ]
    # ab.html, the whole report, links the same bundles
    assert re.findall(
        r'<li>base: spinning stall at \d+ s: <a href="([^"]+)/">', (out / "ab.html").read_text()
    ) == [path for path, _ in bundles]
    assert all((out / path / "manifest.json").exists() for path, _ in bundles)
    assert re.match(
        r"scheduler \(base\): [1-4] running, \d+ waiting .* 0 of 319 blocks free", bundles[0][1]
    ), bundles
    assert "A/B: restore-stall, 2 seeds, virtual clock" in done.stdout  # the table was printed
    # reports are re-made offline from the saved directories alone
    (out / "ab.md").unlink()
    again = CliRunner().invoke(app, ["report", str(out)])
    assert again.exit_code == 0, again.output
    assert (out / "ab.md").read_text() == md


def test_strict_fails_when_a_fix_seed_stalls(tmp_path: Path) -> None:
    args = ["ab", "--fix", "sim:base", "--seed", "8", "--duration", "1200"]
    done = _kit(*args, "--strict", "--no-dashboard", "--out", str(tmp_path / "s"))
    assert done.returncode == 1, done.stderr[-2000:]
    assert "strict: fix arm stalled" in done.stderr


@pytest.mark.wallclock
def test_ab_on_the_wall_clock_serves_the_arms_over_http(tmp_path: Path) -> None:
    out = tmp_path / "wall"
    args = ["ab", "--clock", "wall", "--duration", "240", "--time-scale", "60", "--agents", "4"]
    done = _kit(*args, "--no-dashboard", "--out", str(out), timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((out / "ab.json").read_text())
    for arm in data["arms"].values():
        assert arm["clock"] == "wall" and len(arm["seeds"]) == 1
        assert arm["seeds"][0]["seed"] == 8
    for name in ("base", "fix"):
        # requests went over HTTP (each one recorded, even when the run ended it in flight)
        assert (out / name / "turns.jsonl").read_text().strip(), name
        assert "serving on http://127.0.0.1" in (out / name / "engine.log").read_text()


@pytest.mark.wallclock
def test_a_wall_clock_arm_reports_its_true_engine_time_and_lag(tmp_path: Path) -> None:
    """At 10000x the run's figures use the engine time it covered, and its mark follows it."""
    kit = (REPO / "kits" / "shipped" / "restore-stall.toml").read_text()
    for old, new in (
        ("time_scale = 30", "time_scale = 10000"),
        ("duration_s = 5400", "duration_s = 40000"),
        ("read_timeout_s = 600", "read_timeout_s = 1000000"),
        # 60 engine s are 6 wall ms here: requests the clients sent and the engine has not yet
        # taken in (sized, parsed) would read as a stall whose gauges say idle and stop the run
        ("stall_after_s = 60", "stall_after_s = 600000"),
        ("stop_after_s = 240", "stop_after_s = 600000"),
    ):
        assert old in kit, old
        kit = kit.replace(old, new)
    (tmp_path / "fast.toml").write_text(kit)
    out = tmp_path / "lag"
    args = ["run", "--kit", str(tmp_path / "fast.toml"), "--engine", "sim:fix"]
    done = _kit(*args, "--no-dashboard", "--out", str(out), timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    meta = json.loads((out / "meta.json").read_text())
    achieved = meta["engine_s_per_wall_s"]
    assert achieved == pytest.approx(meta["engine_s"] / meta["wall_s"], rel=0.01)
    arm = json.loads((out / "run.json").read_text())["arms"]["run"]
    # its length is the engine time it really covered, not wall time times the nominal scale
    assert arm["duration_s"] == pytest.approx(meta["engine_s"], abs=0.1)
    behind = achieved < 9700 or "behind its clock" in (out / "engine.log").read_text()
    assert arm["like_for_like"] is (not behind)
    assert arm["seeds"][0]["like_for_like"] is (not behind)
    assert ("fell behind its clock" in (out / "run.md").read_text()) is behind


@pytest.mark.wallclock
def test_ctrl_c_during_run_keeps_records_and_stops_everything(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stallkit",
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
    children = descendants(proc.pid)
    assert children, "the simulator should run as a child"
    before = turns.read_text().splitlines()[:3]
    os.kill(proc.pid, signal.SIGINT)
    started = time.monotonic()
    # an interrupted run writes its summary and reports and stops its simulator: a few s on
    # the idle reference machine; 15 s (30 to wait at all), stretched by its speed and load
    output, _ = proc.communicate(timeout=scaled(30))
    assert time.monotonic() - started < scaled(15), "Ctrl-C must end the run within seconds"
    assert proc.returncode == 130, output[-2000:]
    assert "interrupted" in output
    time.sleep(0.5)
    assert still_alive(children) == []
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


@pytest.mark.wallclock
def test_ctrl_c_during_a_virtual_ab_stops_every_arm_and_keeps_their_records(
    tmp_path: Path,
) -> None:
    out = tmp_path / "v"
    args = ["ab", "--seeds", "6", "--duration", "3000", "--no-dashboard", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "stallkit", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(out.glob("*/seed-*/turns.jsonl")):
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.1)
    children = descendants(proc.pid)
    assert children, "virtual arms run in worker processes"
    os.kill(proc.pid, signal.SIGINT)
    started = time.monotonic()
    # the arms' workers end and the report is written: a few s on the idle reference
    # machine; 20 s (60 to wait at all), stretched by its speed and load
    output, _ = proc.communicate(timeout=scaled(60))
    assert time.monotonic() - started < scaled(20), "Ctrl-C must end the run within seconds"
    assert proc.returncode == 130, output[-2000:]
    assert "Traceback" not in output
    time.sleep(0.5)
    assert still_alive(children) == []
    metas = [json.loads(p.read_text()) for p in out.glob("*/seed-*/meta.json")]
    assert any(m["end_reason"] == "interrupted" for m in metas), metas
    assert (out / "ab.md").exists()  # the report of what was recorded


def test_bad_inputs_are_one_line_errors_with_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    cases = [
        (["ab", "--seeds", "0", "--out", str(tmp_path / "e")], "a seed count must be N >= 1"),
        (["ab", "--seeds", "5-2", "--out", str(tmp_path / "f")], "is not a seed count"),
        (["ab", "--seeds", "1,1", "--out", str(tmp_path / "g")], "distinct seeds"),
        (["ab", "--seeds", "1,,2", "--out", str(tmp_path / "g2")], "is not a seed count"),
        (["ab", "--clock", "sundial", "--out", str(tmp_path / "h")], "is not a clock"),
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
            "docker image arms and twin: arms only",
        ),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, result.output
        assert "Traceback" not in result.output
    assert not any((tmp_path / n).exists() for n in "abcdefgh"), "nothing may start or be written"


def test_unreachable_url_arm_fails_cleanly(tmp_path: Path) -> None:
    out = tmp_path / "u"
    result = CliRunner().invoke(
        app, ["run", "--engine", "url:http://127.0.0.1:9", "--no-dashboard", "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    # nothing was recorded (no engine log, no turn, no sample), so nothing is left behind
    assert not out.exists()


@pytest.mark.wallclock
def test_an_engine_that_dies_mid_run_ends_it_as_such_with_its_last_log_lines(
    tmp_path: Path,
) -> None:
    out = tmp_path / "died"
    argv = [sys.executable, "-m", "stallkit", "run", "--engine", "sim:fix", "--time-scale", "20"]
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
    engine = descendants(proc.pid)
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
