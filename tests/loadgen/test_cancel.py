"""A cancel (Ctrl-C, SIGTERM, the arm ending) always stops the agents' event loop.

The race this pins down: the agents' loop waited for its next event with `asyncio.wait_for`,
which on Python 3.11 returns the event instead of raising when the cancel lands in the same
loop turn as the event, so the cancel was lost and the agents ran on to the run's end.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from stallkit.loadgen.agents import next_item


async def test_a_cancel_that_meets_an_event_in_the_same_turn_is_not_lost() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    waiter = asyncio.create_task(next_item(queue, 100.0))
    await asyncio.sleep(0)  # the waiter now waits on the queue
    queue.put_nowait("event")
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_next_item_returns_events_and_times_out() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    queue.put_nowait("event")
    assert await next_item(queue, None) == "event"
    with pytest.raises(TimeoutError):
        await next_item(queue, 0.0)


#: known uses of asyncio.wait_for still to replace, and why they are still here
KNOWN_WAIT_FOR: set[str] = set()


def test_no_package_waits_with_wait_for() -> None:
    # the same lost-cancel race hides in every `asyncio.wait_for`; `asyncio.timeout` has none
    repo = Path(__file__).resolve().parents[2]
    users = set()
    for package in ("contract", "engine", "loadgen", "monitor", "kits", "reports"):
        for path in (repo / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and node.attr == "wait_for":
                    users.add(str(path.relative_to(repo)))
    assert users <= KNOWN_WAIT_FOR, users - KNOWN_WAIT_FOR
