"""`kit monitor URL` alone tells a frozen engine from a dead one, on a real stopped process.

The simulator runs as its own process (`kit sim serve --port 0`) with a few streaming chats
in flight; `kit monitor` runs as another. A SIGSTOPped server still has its connections
accepted by the kernel's listen backlog and never answers: the monitor names a `frozen`
stall with that evidence (and, continued, ends it when the page answers again). A SIGKILLed
one refuses connections: `down`, never a stall. What is stopped is continued or killed in a
`finally`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from tests.serving import chat_load
from tests.support import REPO, served_sim

#: the monitor's flags: its scrape timeout is 5 intervals (2.5 s), so the frozen stall is
#: named on the second or third unanswered scrape; generous waits below are for a slow CI
MONITOR = ("--interval", "0.5", "--stall-after", "2", "--gpu-source", "none", "--no-dashboard")
#: wall seconds any one expected line may take to show (a loaded CI machine, 1.9x slower)
LINE_WAIT_S = 60.0


def _sim_pid(url: str) -> int:
    """The PID of the simulator listening at `url` (a child of this test's process)."""
    import psutil

    port = int(url.rsplit(":", 1)[1])
    for child in psutil.Process().children(recursive=True):
        for conn in child.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                return child.pid
    raise AssertionError(f"no child process listens on port {port}")


async def _monitor(url: str, out: Path, *flags: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "stallkit",
        "monitor",
        url,
        *MONITOR,
        "--out",
        str(out),
        *flags,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
    )


async def _until(proc: asyncio.subprocess.Process, text: str, seen: list[str]) -> str:
    """Read the monitor's lines into `seen` until one holds `text`; that line."""
    assert proc.stdout is not None
    while True:
        raw = await asyncio.wait_for(proc.stdout.readline(), LINE_WAIT_S)
        assert raw, f"monitor ended before {text!r}:\n" + "".join(seen)
        line = raw.decode()
        seen.append(line)
        if text in line:
            return line


async def _end(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def test_stopped_engine_reads_frozen_and_continued_ends_it(tmp_path: Path) -> None:
    with served_sim("--time-scale", "1", kill_on_hang=True) as url:
        pid = _sim_pid(url)
        async with chat_load(url, 4, 100_000, ignore_eos=True, timeout_s=600):
            proc = await _monitor(url, tmp_path / "mon")
            seen: list[str] = []
            try:
                await _until(proc, "running 4", seen)  # the chats are on the engine
                os.kill(pid, signal.SIGSTOP)
                started = await _until(proc, "STALL started", seen)
                os.kill(pid, signal.SIGCONT)
                ended = await _until(proc, "stall ended", seen)
            finally:
                os.kill(pid, signal.SIGCONT)
                await _end(proc)
    log = "".join(seen)
    assert "STALL started: frozen (connections accepted, page unanswered)" in started, log
    assert "no answer: connection accepted, page unanswered after 2.5 s" in log, log
    assert "stall ended: frozen" in ended and "page answered again after" in log, log
    assert "down:" not in log and "state DOWN" not in log, log


async def test_stopped_engine_exits_on_stall_with_code_3(tmp_path: Path) -> None:
    with served_sim("--time-scale", "1", kill_on_hang=True) as url:
        pid = _sim_pid(url)
        async with chat_load(url, 2, 100_000, ignore_eos=True, timeout_s=600):
            proc = await _monitor(url, tmp_path / "mon", "--exit-on-stall")
            seen: list[str] = []
            try:
                await _until(proc, "running 2", seen)
                os.kill(pid, signal.SIGSTOP)
                await asyncio.wait_for(proc.wait(), LINE_WAIT_S * 2)
                assert proc.stdout is not None
                seen.append((await proc.stdout.read()).decode())
            finally:
                os.kill(pid, signal.SIGCONT)
                await _end(proc)
    log = "".join(seen)
    assert proc.returncode == 3, log
    assert "STALL started: frozen (connections accepted, page unanswered)" in log, log


async def test_killed_engine_reads_down_not_frozen(tmp_path: Path) -> None:
    with served_sim("--time-scale", "1", kill_on_hang=True) as url:
        pid = _sim_pid(url)
        async with chat_load(url, 2, 100_000, ignore_eos=True, timeout_s=600):
            proc = await _monitor(url, tmp_path / "mon")
            seen: list[str] = []
            try:
                await _until(proc, "running 2", seen)
                os.kill(pid, signal.SIGKILL)
                await _until(proc, "down:", seen)
                # stall_after (2 s) passes several times over: still down, never a stall
                await _until(proc, "state DOWN", seen)
                await asyncio.sleep(4)
            finally:
                await _end(proc)
    assert proc.stdout is not None
    log = "".join(seen) + (await proc.stdout.read()).decode()
    assert "STALL" not in log and "no answer" not in log, log
