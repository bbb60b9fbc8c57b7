"""The event loop the agents run on: uvloop when it is installed, else asyncio's own.

Thousands of streams mean thousands of socket reads per second; uvloop's loop (libuv, in C)
makes each cheaper than asyncio's selector loop, so one process keeps more streams on pace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["run"]


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new loop (uvloop when installed), like ``asyncio.run``."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
