"""SIGTERM and Ctrl-C landing while `kit load`'s event loop is busy with streams, through real
processes: the load stops at once, says nothing but its summary, and keeps its turns.

A signal handler runs at whatever Python frame is executing; with many streams that is often
a protocol's `data_received`, where uvloop catches any exception, prints "Fatal error on
transport" with a traceback, and goes on: a SIGTERM raised there as KeyboardInterrupt was
swallowed and the load ran on. The signal must reach the loop, never the frame it landed in.
Whether it lands in a callback is a matter of timing, so each case sends it while a dozen
agents stream.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.machine import scaled
from tests.support import REPO, served_sim

pytestmark = pytest.mark.wallclock

#: how long a stopped load may take to exit (it writes its summary): about 1 s on the idle
#: reference machine; 30 s, stretched by this machine's speed and load
EXIT_WITHIN_S = scaled(30.0)


def _ignore_ctrl_c() -> None:  # as a shell script's `kit load ... &` starts it
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_for_turns(path: Path, count: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + scaled(60.0)
    while not (path.exists() and len(path.read_text().splitlines()) >= count):
        assert proc.poll() is None, "the load ended before the signal"
        assert time.monotonic() < deadline, "no turns recorded"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("sig", "ignore_ctrl_c"),
    [(signal.SIGTERM, True), (signal.SIGTERM, False), (signal.SIGINT, False)],
    ids=["sigterm-background-job", "sigterm", "sigint"],
)
def test_a_signal_amid_streams_stops_the_load_cleanly(
    sig: signal.Signals, ignore_ctrl_c: bool, tmp_path: Path
) -> None:
    out = tmp_path / "load"
    with served_sim("--time-scale", "50") as url:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stallkit", "load", url, "--agents", "12",
             "--duration", "20000", "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            preexec_fn=_ignore_ctrl_c if ignore_ctrl_c else None,
        )  # fmt: skip
        try:
            _wait_for_turns(out / "turns.jsonl", 30, proc)
            proc.send_signal(sig)
            stdout, stderr = proc.communicate(timeout=EXIT_WITHIN_S)
        finally:
            if proc.poll() is None:  # the signal was lost: the load runs on
                proc.kill()
                proc.communicate()
    said = stdout + stderr
    assert "Traceback" not in said and "Fatal error" not in said, said
    assert proc.returncode == 130, said
    assert "load summary" in stdout
    turns = [json.loads(line) for line in (out / "turns.jsonl").read_text().splitlines()]
    assert len(turns) >= 30
    assert json.loads((out / "summary.json").read_text())["turns_ok"] >= 30
