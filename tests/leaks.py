"""Nothing a test starts outlives it: the autouse check that fails the test which leaked.

Before each test (after the session- and module-scoped fixtures it uses are set up) the check
notes this process's listening sockets and live child processes; after the test's own
fixtures are torn down it looks again. A listening socket or a child process that appeared
during the test and is still there fails *that* test at teardown, naming what was left (a
port, a PID and its command line), and the leaked children are killed so the tests after it
run on a clean machine. Without it a leak surfaced later and elsewhere: a server left
listening by a failed test was garbage-collected during an unrelated one, whose
`ResourceWarning` failed it under `filterwarnings = error`.

Registered by `tests/conftest.py` (`pytest_plugins`); a pytest run of any folder can load it
with `-p tests.leaks`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psutil
import pytest

#: How long teardown may take to reap a child it has already signalled. A clean test pays
#: nothing (the first look finds nothing new); a child that was told to stop gets this long to
#: go. It is not a speed bound: a child on its way out is reaped in milliseconds on an idle
#: core, and a loaded 2-core machine was seen to take up to a second to schedule it. The
#: check's own test sets it lower (`STALLKIT_TEST_REAP_GRACE_S`) where it leaks on purpose.
REAP_GRACE_S = float(os.environ.get("STALLKIT_TEST_REAP_GRACE_S", "10"))


@dataclass(frozen=True)
class Held:
    """What this process holds that a test could leave behind."""

    listening: frozenset[tuple[str, int]]
    children: frozenset[tuple[int, float]]  # (pid, create time): a reused PID is another child


def _listening(proc: psutil.Process) -> frozenset[tuple[str, int]]:
    try:
        conns = proc.net_connections(kind="inet")
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        return frozenset()
    return frozenset(
        (str(c.laddr.ip), int(c.laddr.port)) for c in conns if c.status == psutil.CONN_LISTEN
    )


#: children a process starts once for its whole life, on first use, and never leaks: the
#: multiprocessing helpers (the resource tracker, the forkserver)
PROCESS_LIFETIME_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _children(proc: psutil.Process) -> frozenset[tuple[int, float]]:
    found = set()
    for child in proc.children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if any(h in " ".join(child.cmdline()) for h in PROCESS_LIFETIME_HELPERS):
                continue
            found.add((child.pid, child.create_time()))
        except psutil.NoSuchProcess:
            continue
    return frozenset(found)


def held(proc: psutil.Process | None = None) -> Held:
    """This process's listening sockets and live children, now."""
    proc = proc or psutil.Process(os.getpid())
    return Held(_listening(proc), _children(proc))


def new_since(before: Held, now: Held) -> Held:
    """What `now` holds that `before` did not."""
    return Held(now.listening - before.listening, now.children - before.children)


def _describe_child(pid: int) -> str:
    try:
        cmd = " ".join(psutil.Process(pid).cmdline())[:160]
    except psutil.Error:
        cmd = "?"
    return f"child process {pid} ({cmd})"


def describe(left: Held) -> str:
    """One line per thing left behind."""
    parts = [f"listening socket {ip}:{port}" for ip, port in sorted(left.listening)]
    parts += [_describe_child(pid) for pid, _ in sorted(left.children)]
    return "; ".join(parts)


def _kill(children: frozenset[tuple[int, float]]) -> None:
    procs = []
    for pid, created in children:
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created:
                proc.kill()
                procs.append(proc)
        except psutil.Error:
            continue
    psutil.wait_procs(procs, timeout=5)


#: what module-, package- and session-scoped fixtures set up: theirs to keep past a test,
#: also when a test asks for one mid-way (`request.getfixturevalue`)
_wider = Held(frozenset(), frozenset())


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any]) -> Iterator[None]:
    """Note what a fixture wider than one test starts: not a leak of the test that asked."""
    if fixturedef.scope == "function":
        return (yield)
    with kept_beyond_the_test():
        return (yield)


@contextlib.contextmanager
def kept_beyond_the_test() -> Iterator[None]:
    """What starts within is shared beyond the test that started it (a server a fixture wider
    than one test starts lazily, on a test's first use), not a leak of that test."""
    global _wider
    before = held()
    try:
        yield
    finally:
        grown = new_since(before, held())
        _wider = Held(_wider.listening | grown.listening, _wider.children | grown.children)


def left_behind(before: Held, grace_s: float = REAP_GRACE_S) -> Held:
    """What is still held beyond `before` and the wider fixtures', after giving what is on its
    way out `grace_s` to go."""
    deadline = time.monotonic() + grace_s

    def left_now() -> Held:
        left = new_since(before, held())
        return Held(left.listening - _wider.listening, left.children - _wider.children)

    left = left_now()
    while (left.children or left.listening) and time.monotonic() < deadline:
        time.sleep(0.05)
        left = left_now()
    return left


@pytest.fixture(autouse=True)
def _nothing_left_behind() -> Iterator[None]:
    """Fail the test whose teardown left a listening socket or a child process behind."""
    before = held()
    yield
    left = left_behind(before)
    if left.listening or left.children:
        what = describe(left)
        _kill(left.children)
        pytest.fail(f"left behind after the test's teardown: {what}", pytrace=False)
