"""ProcessLauncher.stop() against real process trees that try to outlive it.

The engine here is a small Python script that starts helpers the way real engines do: one in
the launcher's process group, one that leaves it for a session of its own and ignores
SIGTERM, and one whose parent exits so it is re-parented. Some are SIGSTOPped before the stop.
After stop() none may be left, and the engine log says where our stop began.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stallkit.contract.files import STOP_MARKER
from stallkit.engine.launch.base import ProcessLauncher
from stallkit.engine.launch.vllm import default_args
from stallkit.engine.spec import SimSpec
from stallkit.reports.rundir import count_log_patterns
from tests.support import alive

pytestmark = pytest.mark.wallclock

ENGINE = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    pids = sys.argv[1]
    sleeper = [sys.executable, "-c", "import signal, time; "
               "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
    same_group = subprocess.Popen(sleeper)
    own_session = subprocess.Popen(sleeper, start_new_session=True)
    # a middle process that starts a grandchild and exits: the grandchild is re-parented
    middle = subprocess.Popen([sys.executable, "-c",
        "import subprocess, sys; p = subprocess.Popen(sys.argv[1:], start_new_session=True); "
        "print(p.pid, flush=True)", *sleeper], stdout=subprocess.PIPE, text=True)
    orphan = int(middle.stdout.readline())
    middle.wait()
    with open(pids + ".tmp", "w") as fh:
        fh.write(" ".join(str(p) for p in (same_group.pid, own_session.pid, orphan)))
    os.replace(pids + ".tmp", pids)
    print("engine up", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
    """
)


def _launcher(tmp_path: Path) -> tuple[ProcessLauncher, Path]:
    script = tmp_path / "engine.py"
    script.write_text(ENGINE)
    pids = tmp_path / "pids"
    spec = SimSpec(raw="test-engine", policy="base")
    launcher = ProcessLauncher(
        spec, [sys.executable, str(script), str(pids)], tmp_path / "engine.log", grace_s=1.0
    )
    return launcher, pids


def _wait_for(path: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_stop_leaves_no_process_of_the_engine_whatever_its_state(tmp_path: Path) -> None:
    launcher, pids_file = _launcher(tmp_path)
    launcher.start()
    try:
        _wait_for(pids_file)
        helpers = [int(p) for p in pids_file.read_text().split()]
        root = launcher.pids()[0]
        assert all(alive(pid) for pid in [root, *helpers])
        # the helper in its own session is out of reach of a process-group kill; stop it and
        # the engine itself, which then act on no signal until continued
        for pid in (helpers[1], helpers[2], root):
            os.kill(pid, signal.SIGSTOP)
        assert os.getpgid(helpers[1]) != os.getpgid(root)
    finally:
        launcher.stop()
    assert [pid for pid in [root, *helpers] if alive(pid)] == []
    assert launcher.pids() == []
    launcher.stop()  # idempotent


def test_exit_reason_is_none_while_running_and_says_how_it_ended(tmp_path: Path) -> None:
    launcher, pids_file = _launcher(tmp_path)
    assert launcher.exit_reason() is None  # not started: nothing ended
    launcher.start()
    try:
        _wait_for(pids_file)
        assert launcher.exit_reason() is None
        os.kill(launcher.pids()[0], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while launcher.exit_reason() is None:
            assert time.monotonic() < deadline, "the killed engine still reads as running"
            time.sleep(0.05)
        assert launcher.exit_reason() == f"exit code {-signal.SIGKILL}"
    finally:
        launcher.stop()


def test_stop_marks_the_log_and_later_lines_are_not_counted(tmp_path: Path) -> None:
    launcher, pids_file = _launcher(tmp_path)
    launcher.start()
    try:
        _wait_for(pids_file)
    finally:
        launcher.stop()
    log = tmp_path / "engine.log"
    text = log.read_text()
    assert "engine up" in text and STOP_MARKER in text
    assert text.index("engine up") < text.index(STOP_MARKER)
    # the engine failing before the stop counts; its shutdown noise after the marker does not
    patterns = {"tracebacks": r"Traceback \(most recent call last\)"}
    with log.open("a") as fh:
        fh.write("Traceback (most recent call last):\n  EngineDeadError\n")
    assert count_log_patterns(log, patterns) == {"tracebacks": 0}
    failed = tmp_path / "failed.log"
    failed.write_text(
        f"Traceback (most recent call last):\nboom\n{STOP_MARKER}\nTraceback (most recent call last):\n"
    )
    assert count_log_patterns(failed, patterns) == {"tracebacks": 1}


@pytest.mark.parametrize(
    ("args", "on_cpu", "added"),
    [
        ((), True, ["--dtype", "float32"]),
        (("--enforce-eager",), True, ["--dtype", "float32"]),
        (("--dtype", "bfloat16"), True, []),
        (("--dtype=half",), True, []),
        ((), False, []),
    ],
)
def test_cpu_engines_serve_float32_unless_the_kit_says_otherwise(
    args: tuple[str, ...], on_cpu: bool, added: list[str]
) -> None:
    assert default_args(args, on_cpu=on_cpu) == added
