"""The one monitor loop: every interval, read the source, feed the step, yield the events.

Whatever is watched, the schedule is `run_loop()`: check the source, start the clock, take
the source's first events, then at each multiple of the interval read the source and yield
what its step made of the reading, until `duration_s` or until the caller closes the
generator (which closes the source). A read slower than the interval skips the ticks it
overran rather than piling them up. What a reading means stays with the source and its pure
step: one engine over HTTP (`stallkit.monitor.live.watch.EngineSource`: `/metrics`, the
GPUs and the engine's CPU seconds, into one `MonitorStep`) or a fleet through Prometheus
(`stallkit.monitor.fleet.watch.FleetSource`: three instant queries into the `FleetBank`).
The clock and the sleep are injectable, so the schedule is tested with a fake clock.
`consume()` is the other half, shared by the sessions: each event to every sink, a live
view started once the source's checks passed, a stop condition.

The virtual clock's arm driver (`stallkit.kits.arm.virtual`) feeds the same pure step but
keeps its own tick, on purpose. There nothing sleeps: the tick is one deadline on a
synchronous heap of engine times, next to the agents' timers, the read timeouts and the
engine core's steps, and `run_virtual_arm` is a plain function that A/B, sweeps and hunts
run per arm in a pool of processes. Driving it from here would put an event loop under every virtual arm and an await
under every tick on the A/B path, and its next tick is counted from the engine time the
core reached (`int(now / interval) + 1`), not by this loop's overrun rule: the same
schedule in exact arithmetic, not always in floating point, and the A/B files must not
move by one tick.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

__all__ = ["EventSink", "Source", "consume", "run_loop"]

E = TypeVar("E")
E_co = TypeVar("E_co", covariant=True)
E_contra = TypeVar("E_contra", contravariant=True)


class Source(Protocol[E_co]):
    """What the loop reads: its checks, its first events, one reading's events, its close."""

    @property
    def read_at_start(self) -> bool:
        """Whether `start` already read the source at `t` = 0 (the next read is one interval
        later), rather than only announcing the start (the first read is at once)."""
        ...

    async def check(self) -> None:
        """What must hold before the clock starts (raises the source's error otherwise)."""
        ...

    async def start(self, t0: float) -> Sequence[E_co]:
        """The events at `t` = 0, the clock having started at `t0`."""
        ...

    async def read(self, t: float, at: float) -> Sequence[E_co]:
        """One tick's events: the source read at `at` on the clock, `t` seconds after `t0`."""
        ...

    async def aclose(self) -> None:
        """Release what the source holds (called however the loop ends)."""
        ...


async def run_loop(
    source: Source[E],
    interval_s: float,
    *,
    duration_s: float | None,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[object]],
) -> AsyncGenerator[E, None]:
    """Read `source` every `interval_s` until `duration_s` (None: until the caller stops)."""
    try:
        await source.check()
        t0 = clock()
        for event in await source.start(t0):
            yield event
        tick = 1 if source.read_at_start else 0
        while True:
            target = tick * interval_s
            if duration_s is not None and target > duration_s:
                return
            delay = t0 + target - clock()
            if delay > 0:
                await sleep(delay)
            at = clock()
            for event in await source.read(at - t0, at):
                yield event
            # A read slower than the interval skips the ticks it overran, not piles them up.
            tick = max(tick + 1, math.floor((clock() - t0) / interval_s) + 1)
    finally:
        await source.aclose()


class EventSink(Protocol[E_contra]):
    """Anything that consumes events."""

    def handle(self, event: E_contra) -> None: ...


async def consume(
    events: AsyncGenerator[E, None],
    sinks: Sequence[EventSink[E]],
    *,
    view: Callable[[], contextlib.AbstractAsyncContextManager[object]] | None = None,
    stop_when: Callable[[E], bool] | None = None,
) -> None:
    """Hand each event to every sink until the events end or `stop_when(event)`.

    `view`, when given, is entered just before the first event is handled, so an error in
    the source's checks is one clean line rather than a half-drawn screen; it is left, and
    the events closed, however this ends.
    """
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(events.aclose)
        first = True
        async for event in events:
            if first and view is not None:
                await stack.enter_async_context(view())
            first = False
            for sink in sinks:
                sink.handle(event)
            if stop_when is not None and stop_when(event):
                break
