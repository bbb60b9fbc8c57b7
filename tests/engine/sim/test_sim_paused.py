"""A simulator whose process was stopped says so, rather than advising a lower time scale.

After a SIGSTOP the wall clock has run on while the simulator did not, so it is behind its
clock by the pause: that lag is the pause's, which a lower `--time-scale` would not cure.
`PauseWatch` (pure, on a fake clock) tells such a pause from the loop's own sleeps; the
real process is stopped for longer than the lag warning's threshold and continued.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

from stallkit.engine.serve.driver import LAG_WARN_S, PAUSE_S, PauseWatch
from tests.serving import chat_load
from tests.support import REPO


def test_pause_watch_tells_a_stop_from_the_loops_own_sleeps() -> None:
    now = [0.0]
    watch = PauseWatch(lambda: now[0])
    now[0] = 30.0
    assert watch.beat(asked_s=30.0) is None  # it slept as long as it asked
    now[0] += 0.5
    assert watch.beat() is None  # a slow turn on a starved machine
    now[0] += PAUSE_S + 40.0
    assert watch.beat() == PAUSE_S + 40.0 and watch.owed_s == PAUSE_S + 40.0
    watch.caught_up()
    assert watch.owed_s == 0.0


async def test_stopped_simulator_says_it_was_stopped_not_lower_the_time_scale() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "stallkit", "sim", "serve", "--port", "0", "--time-scale", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert server.stdout is not None and server.stderr is not None
    try:
        url = server.stdout.readline().split()[-1]
        async with chat_load(url, 2, 100_000, ignore_eos=True, timeout_s=600):
            await asyncio.sleep(1.0)  # the chats are on the engine, which has work
            server.send_signal(signal.SIGSTOP)
            try:
                # longer than the lag warning's threshold, so the old rule would have fired
                await asyncio.sleep(LAG_WARN_S + PAUSE_S)
            finally:
                server.send_signal(signal.SIGCONT)
            await asyncio.sleep(2.0)
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)
    log = server.stderr.read()
    server.stdout.close()
    server.stderr.close()
    assert "simulator was stopped for" in log, log
    assert "lower --time-scale" not in log, log
