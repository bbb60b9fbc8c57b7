"""`kit run` with its simulator child stopped whole (SIGSTOP): the stall is named `frozen`, the
run stops on its own without the engine being continued by anyone else, everything is
recorded, and the view shows one engine clock and a banner that follows the stall's events.

The run is a real `kit run` process; the test stops the simulator it launched and never
continues it (the launcher's stop must), though a `finally` does, should the run not end.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from rich.console import Console

from stallkit.contract.meta import ArmMeta
from stallkit.kits.arm.view import RunView
from stallkit.monitor import MonitorEvent, parse_metrics
from stallkit.monitor.detect.events import (
    DetectorState,
    Down,
    Sample,
    StallStarted,
    StopRequested,
    Verdict,
)
from tests.support import REPO

#: wall seconds for the whole run: the load reaching the engine, the stall named after 60
#: engine s (2 wall s at 30x), the stop after 240 (8 wall s, in 5 s scrapes), reports; a
#: slow CI machine takes several times as long
RUN_WAIT_S = 150.0
DATA = REPO / "tests" / "monitor" / "data"


def _sim_child(pid: int) -> psutil.Process | None:
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "stallkit.engine.serve" in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            continue
    return None


def test_a_run_whose_engine_is_stopped_whole_stops_on_a_frozen_stall(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["run", "-e", "sim:fix", "-k", "restore-stall", "--no-dashboard", "-o", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "stallkit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
    )
    assert proc.stdout is not None
    sim: psutil.Process | None = None
    seen: list[str] = []
    try:
        for line in proc.stdout:  # until the load is on the engine
            seen.append(line)
            if " running " in line and "running 0" not in line:
                break
        sim = _sim_child(proc.pid)
        assert sim is not None, "".join(seen)
        sim.send_signal(signal.SIGSTOP)
        rest, _ = proc.communicate(timeout=RUN_WAIT_S)
        seen.append(rest)
    finally:
        if sim is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                sim.send_signal(signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    log = "".join(seen)
    assert proc.returncode == 0, log
    assert sim is not None and not sim.is_running(), "the launcher left its engine behind"
    meta = ArmMeta.model_validate_json((out / "meta.json").read_text())
    assert meta.end_reason == "stall_stop" and meta.stopped_by_monitor, log
    lines = [json.loads(x) for x in (out / "timeline.jsonl").read_text().splitlines()]
    [stall] = [x for x in lines if x["type"] == "stall_started"]
    assert stall["kind"] == "frozen" and stall["evidence"]["page_unanswered"], stall
    assert stall["evidence"]["connections_accepted"], stall
    assert any(x["type"] == "stop_requested" for x in lines)
    assert (out / "turns.jsonl").exists() and (out / "summary.json").exists()
    # one engine clock in the end's line, the simulator's own said apart when it differs
    assert "stopped by the monitor during a stall after" in log and "engine s at 30x" in log, log


def _render(view: RunView) -> str:
    assert view.dashboard is not None
    console = Console(
        file=io.StringIO(), width=80, height=24, color_system=None, force_terminal=False
    )
    console.print(view.dashboard.render())
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(text, str)
    return text


async def test_the_run_view_shows_one_clock_and_follows_the_stall(tmp_path: Path) -> None:
    console = Console(file=io.StringIO(), width=80, height=24, force_terminal=True)
    view = RunView(console, "run", "sim:fix", 900.0, True, scale=1.0)
    page = parse_metrics((DATA / "vllm-0.32-two-engines.txt").read_text())
    events: list[MonitorEvent] = [
        Sample(10.0, page, None),
        Verdict(10.0, DetectorState("ok")),
        Down(15.0, "connection accepted, page unanswered after 5 s (ReadTimeout)", True),
        Verdict(15.0, DetectorState("suspect", 10.0, 5.0)),
        Down(20.0, "connection accepted, page unanswered after 5 s (ReadTimeout)", True),
        StallStarted(20.0, 10.0, "frozen", False, page),
        StopRequested(20.0, 10.0, 10.0),  # the run stops here: the tick's verdict never comes
    ]
    async with view.live("http://127.0.0.1:8000"):
        # the load began 100.5 wall s ago: far from a second's edge, so both reads agree
        view.started = time.monotonic() - 100.5
        for event in events:
            view.handle(event)
        screen = _render(view)
    assert "attached 1m40s" in screen and "1m40s of 15m00s engine" in screen, screen
    assert "STALLED frozen 10 s" in screen and "SUSPECT" not in screen, screen
    assert "stale: last read 10 s ago" in screen, screen


@pytest.mark.parametrize(
    ("scale", "engine_s", "said"),
    [
        (30.0, 696.0, "1992 engine s at 30x (66.4 wall s); the simulator's own clock ran 696 s"),
        (30.0, 1990.0, "1992 engine s at 30x (66.4 wall s)"),
        (1.0, None, "66.4 wall s"),
    ],
)
def test_the_end_line_names_one_engine_clock(
    scale: float, engine_s: float | None, said: str
) -> None:
    view = RunView(Console(file=io.StringIO()), "run", "sim:fix", 5400.0, False, scale=scale)
    meta = ArmMeta.model_validate(
        {
            "arm": "run",
            "spec": "sim:fix",
            "kind": "sim",
            "clock": "wall",
            "seed": 1,
            "time_scale": scale,
            "planned_duration_s": 5400.0,
            "started_at": "2026-12-05T23:06:58+00:00",
            "end_reason": "stall_stop",
            "wall_s": 66.4,
            "engine_s": engine_s,
        }
    )
    assert view.ran(meta) == said
