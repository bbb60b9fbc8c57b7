"""`kit ab` as a user sees it, through the real process: the plan first, a line per arm and
seed as each ends, then the table; a Ctrl-C says at once what it stops, starts nothing more,
keeps every finished seed and gives no verdict over fewer seeds than were asked for (`kit
report --partial` makes one); a test with no spread says "not enough data" everywhere.

No wall-clock bounds: every wait is for a line of output, with a generous process timeout."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.support import REPO, kit

#: `base seed 9: stalled, stopped by the monitor at 2872 engine s (1.6 wall s)`, or after a
#: Ctrl-C `fix seed 11: interrupted at 1922 engine s`
SEED_LINE = re.compile(r"^(base|fix) seed (\d+): ")
STOPPING = re.compile(r"^stopping: (\d+) runs? going, (\d+) not started; partial results go to ")
#: the process's own limit, far above what any of these runs takes on a loaded machine
TIMEOUT_S = 300


def _kit_ab(*args: str) -> subprocess.Popen[str]:
    """`kit ab ARGS` with an 80-column console, as in a terminal of that size."""
    return subprocess.Popen(
        [sys.executable, "-m", "stallkit", "ab", "--no-dashboard", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "80"},
    )


def _seed_lines(lines: list[str]) -> list[tuple[str, int]]:
    found = (SEED_LINE.match(line) for line in lines)
    return [(m[1], int(m[2])) for m in found if m]


def _recorded(out: Path) -> dict[tuple[str, int], str]:
    """Each seed directory's end reason, by (arm, seed)."""
    ends = {}
    for meta_path in out.glob("*/seed-*/meta.json"):
        meta = json.loads(meta_path.read_text())
        ends[meta["arm"], meta["seed"]] = meta["end_reason"]
    return ends


def test_ctrl_c_says_what_it_stops_keeps_what_finished_and_gives_no_verdict(
    tmp_path: Path,
) -> None:
    out = tmp_path / "ab"
    proc = _kit_ab("--out", str(out))  # the README's first command: 10 seeds, 20 arm runs
    assert proc.stdout is not None
    before: list[str] = []
    for line in proc.stdout:  # the Ctrl-C lands once the first seed has ended
        before.append(line.rstrip("\n"))
        if SEED_LINE.match(line):
            break
    else:
        raise AssertionError(f"no seed ended: {before}")
    proc.send_signal(signal.SIGINT)
    rest, stderr = proc.communicate(timeout=TIMEOUT_S)
    after = rest.splitlines()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in rest + stderr
    assert f"error: interrupted; partial results kept in {out}" in stderr
    assert f"kit report --partial {out}" in " ".join(stderr.split())
    # what it stops is said before the reports are written (a seed may end as the signal lands)
    stops = [STOPPING.match(line) for line in after]
    first = next(i for i, m in enumerate(stops) if m)
    assert first < after.index("writing the tables of what was recorded (Ctrl-C again skips them)")
    stopping = stops[first]
    assert stopping is not None
    going, not_started = int(stopping[1]), int(stopping[2])
    ends = _recorded(out)
    # nothing started after the Ctrl-C, and every run handed out has its line (one stopped as
    # its worker took it leaves no directory)
    unstarted = [line for line in after if line.endswith(": stopped before it started")]
    assert len(ends) + len(unstarted) + not_started == 20, (ends, stopping[0])
    said = _seed_lines(before) + _seed_lines(after)
    assert len(said) == len(ends) + len(unstarted), said
    assert set(ends) <= set(said), (said, ends)
    assert len(_seed_lines(after[first:])) >= going
    # the seeds that ended before the Ctrl-C are kept as they finished
    for arm, seed in _seed_lines(before + after[:first]):
        assert ends[arm, seed] in ("duration", "stall_stop")
        assert (out / arm / f"seed-{seed}" / "summary.json").exists()
    finished = {s for s in range(8, 18) if all(ends.get((a, s)) in ("duration", "stall_stop")
                                               for a in ("base", "fix"))}  # fmt: skip
    text = " ".join(rest.split())
    assert f"interrupted: partial, {len(finished)} of 10 seeds" in text
    for verdict_words in ("verdict:", "p = ", ": yes (", ": no ("):
        assert verdict_words not in text, verdict_words
    data = json.loads((out / "ab.json").read_text())
    assert data["verdict"] is None
    # its exit waits for no plot: `kit report` draws them
    assert not (out / "ab.html").exists() and not (out / "timeline.png").exists()
    assert data["partial"] == {
        "seeds_planned": 10, "seeds_finished": len(finished), "verdict_given": False,
    }  # fmt: skip
    # re-made from the directory: still no verdict, unless asked for over the seeds recorded
    again = kit("report", str(out), timeout=TIMEOUT_S)
    assert again.returncode == 0, again.stderr
    assert "interrupted: partial" in again.stdout and "p = " not in again.stdout
    assert "interrupted: partial" in (out / "ab.html").read_text()
    assert (out / "timeline.png").exists()
    asked = kit("report", "--partial", str(out), timeout=TIMEOUT_S)
    assert asked.returncode == 0, asked.stderr
    assert "verdict:" in asked.stdout and "p = " in asked.stdout
    assert json.loads((out / "ab.json").read_text())["partial"]["verdict_given"] is True


def test_kit_ab_says_its_plan_first_then_each_seed_as_it_ends_then_the_table(
    tmp_path: Path,
) -> None:
    out = tmp_path / "ab"
    args = ("--seeds", "3", "--duration", "600", "--out", str(out))
    plan = kit("ab", "--dry-run", *args, timeout=TIMEOUT_S)
    assert plan.returncode == 0, plan.stderr
    proc = _kit_ab(*args)
    stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, stderr
    lines = stdout.splitlines()
    # the plan, as --dry-run prints it (wrapped to the 80 columns)
    assert " ".join(stdout.split()).startswith(" ".join(plan.stdout.split()))
    running = next(i for i, line in enumerate(lines) if line.startswith("running 2 arms x 3 seeds"))
    title = next(
        i for i, line in enumerate(lines) if line.startswith("A/B: restore-stall, 3 seeds")
    )
    seeds = [i for i, line in enumerate(lines) if SEED_LINE.match(line)]
    assert running < min(seeds) and max(seeds) < title
    # one line per arm and seed, none missing, none twice
    assert sorted(_seed_lines(lines)) == [(a, s) for a in ("base", "fix") for s in (8, 9, 10)]
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)


def test_arms_alike_in_every_seed_are_not_enough_data_in_every_report(tmp_path: Path) -> None:
    """Both arms the same engine: every seed's difference is 0, a standard error of 0 that gave
    p = 0 and a "90 % interval +0.0 to +0.0", a yes that meant nothing."""
    out = tmp_path / "ab"
    proc = _kit_ab("--base", "sim:fix", "--fix", "sim:fix", "--seeds", "2", "--duration", "900",
                   "--out", str(out))  # fmt: skip
    stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, stderr
    terminal = " ".join(stdout.split())
    md = (out / "ab.md").read_text()
    html = (out / "ab.html").read_text()
    for figure in ("goodput", "TTFT p99", "throughput"):
        said = f"fix is not worse than base by more than 5 % on {figure}: not enough data ("
        assert said in terminal, figure
        assert f"on {figure} |  | not enough data (" in md
        assert f"on {figure}</td><td></td><td>not enough data (" in html
    for text in (terminal, md, html):
        assert "interval +0.0 to +0.0" not in text and "p = 0;" not in text
    tests = json.loads((out / "ab.json").read_text())["verdict"]["noninferiority"]
    assert {t["answer"] for t in tests} == {"inconclusive"}
    assert all(t["p_value"] is None and ": not enough data (" in t["reason"] for t in tests)
