"""The autouse leak check (`tests/leaks.py`), made to fail on purpose in a pytest of its own.

A child pytest runs a generated file whose tests leak a listening socket, leak a child
process, fail mid-way with servers started under a `TaskGroup` (which closes them), and pass
cleanly. The leaking tests must fail at their own teardown naming what they left; the test
after them must pass; nothing must be left once the child pytest has ended.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support import REPO, descendants

LEAKY = """
import asyncio
import socket
import subprocess
import sys

import pytest

from tests.serving import asgi_server

_kept = []


def test_leaks_a_listening_socket():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    _kept.append(sock)  # never closed
    print("LEAKED PORT", sock.getsockname()[1])


def test_leaks_a_child():
    _kept.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]))


async def _app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def _serve_forever(started):
    async with asgi_server(_app) as url:
        started.append(url)
        await asyncio.sleep(300)


async def test_fails_midway_with_servers_under_a_task_group():
    started = []
    with pytest.raises(ExceptionGroup):
        async with asyncio.TaskGroup() as group:
            for _ in range(3):
                group.create_task(_serve_forever(started))
            while len(started) < 3:
                await asyncio.sleep(0.01)
            raise RuntimeError("a watcher failed mid-way")
    raise AssertionError("failed on purpose, after the task group closed its servers")


def test_after_them_is_clean():
    pass
"""


def test_a_leak_fails_the_test_that_leaked_and_nothing_is_left(tmp_path: Path) -> None:
    test_file = tmp_path / "test_leaky.py"
    test_file.write_text(textwrap.dedent(LEAKY))
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.leaks"]\n')
    child = subprocess.Popen(
        [sys.executable, "-m", "pytest", test_file.name, "-p", "no:cacheprovider", "-q",
         "-s", "--rootdir", str(tmp_path), "-o", "asyncio_mode=auto", "-rA"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "STALLKIT_TEST_REAP_GRACE_S": "1"},
    )  # fmt: skip
    try:
        out, _ = child.communicate(timeout=150)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 1, out
    port = next(line.split()[-1] for line in out.splitlines() if "LEAKED PORT" in line)
    summary = out[out.index("short test summary info") :]
    assert "ERROR test_leaky.py::test_leaks_a_listening_socket" in summary, out
    assert "ERROR test_leaky.py::test_leaks_a_child" in summary, out
    assert f"left behind after the test's teardown: listening socket 127.0.0.1:{port}" in out
    assert "left behind after the test's teardown: child process" in out, out
    assert "time.sleep(300)" in out
    # failed mid-way, but the task group closed every server: a failure, no leak
    assert "FAILED test_leaky.py::test_fails_midway_with_servers_under_a_task_group" in summary
    assert "ERROR test_leaky.py::test_fails_midway" not in summary, out
    assert "PASSED test_leaky.py::test_after_them_is_clean" in summary, out
    assert descendants(child.pid) == []
