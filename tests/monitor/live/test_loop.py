"""The one monitor loop (pure schedule, fake clock, no sleeps): when it reads its source, what
it does with a read slower than the interval, that it closes the source however it ends, and
`consume()`'s sinks, view and stop."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from stallkit.monitor.live.loop import consume, run_loop


class FakeClock:
    """Time moves only when the loop sleeps or a read takes `read_s`."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay_s: float) -> None:
        self.sleeps.append(delay_s)
        self.now += delay_s


class FakeSource:
    """Records what the loop asked of it; each read takes `read_s` on the fake clock."""

    def __init__(
        self, clock: FakeClock, *, read_at_start: bool, read_s: float = 0.0, fail: bool = False
    ) -> None:
        self.clock, self.read_at_start, self.read_s, self.fail = clock, read_at_start, read_s, fail
        self.log: list[str] = []
        self.closed = 0

    async def check(self) -> None:
        self.log.append("check")
        if self.fail:
            raise RuntimeError("no answer")

    async def start(self, t0: float) -> list[str]:
        self.log.append(f"start {t0:g}")
        return ["started"]

    async def read(self, t: float, at: float) -> list[str]:
        self.clock.now += self.read_s
        return [f"read {t:g} at {at:g}"]

    async def aclose(self) -> None:
        self.closed += 1


async def _all(source: FakeSource, clock: FakeClock, duration_s: float | None) -> list[str]:
    events = run_loop(source, 1.0, duration_s=duration_s, clock=clock, sleep=clock.sleep)
    return [event async for event in events]


async def test_a_start_that_reads_puts_the_first_read_one_interval_on() -> None:
    clock = FakeClock()
    source = FakeSource(clock, read_at_start=True)
    events = await _all(source, clock, duration_s=3.0)
    assert events == ["started", "read 1 at 1001", "read 2 at 1002", "read 3 at 1003"]
    assert source.log == ["check", "start 1000"]
    assert clock.sleeps == [1.0, 1.0, 1.0]
    assert source.closed == 1


async def test_a_start_that_only_announces_reads_at_once() -> None:
    clock = FakeClock()
    source = FakeSource(clock, read_at_start=False)
    events = await _all(source, clock, duration_s=2.0)
    assert events == ["started", "read 0 at 1000", "read 1 at 1001", "read 2 at 1002"]
    assert clock.sleeps == [1.0, 1.0]


async def test_a_read_slower_than_the_interval_skips_the_ticks_it_overran() -> None:
    clock = FakeClock()
    source = FakeSource(clock, read_at_start=False, read_s=2.5)
    events = await _all(source, clock, duration_s=6.0)
    # read at 0 ends at 2.5: ticks 1 and 2 are skipped, the next read is at 3 (ends 5.5), then 6
    assert events == ["started", "read 0 at 1000", "read 3 at 1003", "read 6 at 1006"]
    assert clock.sleeps == pytest.approx([0.5, 0.5])


async def test_closing_the_generator_closes_the_source_once() -> None:
    clock = FakeClock()
    source = FakeSource(clock, read_at_start=True)
    events = run_loop(source, 1.0, duration_s=None, clock=clock, sleep=clock.sleep)
    seen = []
    async for event in events:
        seen.append(event)
        if len(seen) == 3:
            break
    await events.aclose()
    assert seen == ["started", "read 1 at 1001", "read 2 at 1002"]
    assert source.closed == 1


async def test_a_failed_check_starts_no_clock_and_still_closes() -> None:
    clock = FakeClock()
    source = FakeSource(clock, read_at_start=True, fail=True)
    with pytest.raises(RuntimeError, match="no answer"):
        await _all(source, clock, duration_s=3.0)
    assert source.log == ["check"]
    assert source.closed == 1


class ListSink:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def handle(self, event: str) -> None:
        self.log.append(event)


async def test_consume_opens_the_view_before_the_first_event_and_stops_when_told() -> None:
    clock = FakeClock()
    source = FakeSource(clock, read_at_start=True)
    log: list[str] = []

    @contextlib.asynccontextmanager
    async def view() -> AsyncIterator[None]:
        log.append("view on")
        yield
        log.append("view off")

    events = run_loop(source, 1.0, duration_s=None, clock=clock, sleep=clock.sleep)
    await consume(
        events, [ListSink(log)], view=view, stop_when=lambda event: event.startswith("read 2")
    )
    assert log == ["view on", "started", "read 1 at 1001", "read 2 at 1002", "view off"]
    assert source.closed == 1


async def test_consume_never_opens_the_view_when_the_check_fails() -> None:
    clock = FakeClock()
    source = FakeSource(clock, read_at_start=True, fail=True)
    log: list[str] = []

    @contextlib.asynccontextmanager
    async def view() -> AsyncIterator[None]:
        log.append("view on")
        yield

    events = run_loop(source, 1.0, duration_s=None, clock=clock, sleep=clock.sleep)
    with pytest.raises(RuntimeError):
        await consume(events, [ListSink(log)], view=view)
    assert log == []
    assert source.closed == 1
