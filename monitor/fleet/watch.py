"""Watch a fleet through Prometheus: query every interval, feed the bank, yield fleet events.

`watch_fleet()` checks that the server answers (a `MonitorError` before the first event
otherwise), then at each interval asks Prometheus for the engines' series, their scrape
times and their GPUs at that instant (three queries, whatever the fleet's size), turns the
answers into per-engine readings (`stallkit.monitor.prometheus.queries`) and feeds `stallkit.monitor.fleet.bank.FleetBank`,
yielding what happened. A query that fails is a failed scrape of every engine, and the loop
goes on. Times in events are seconds since the watch started (Unix time minus `t0_unix`,
the first line of `fleet.jsonl`). The clock and the sleep are injectable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.fleet.bank import FORGET_AFTER_S, FleetBank, FleetEvent
from stallkit.monitor.prometheus.client import PrometheusClient, PrometheusError
from stallkit.monitor.prometheus.queries import FleetQuery, Reading, engine_labels, readings


@dataclasses.dataclass(frozen=True, slots=True)
class FleetStart:
    """The watch's first event: the Unix time its `t` = 0 stands for."""

    t: float
    t0_unix: float


@dataclasses.dataclass(frozen=True, slots=True)
class CycleDone:
    """Every engine read at this cycle has had its events (for summaries)."""

    t: float


async def query_instant(
    client: PrometheusClient, query: FleetQuery, at: float
) -> tuple[dict[str, Reading], dict[str, dict[str, str]]]:
    """Every engine's latest reading at Unix time `at`, and its labels (raises
    `PrometheusError`)."""
    series, times, gpu = await asyncio.gather(
        client.query(query.series(), at),
        client.query(query.times(), at),
        client.query(query.gpus(), at) if query.gpu else _none(),
    )
    per = readings(series, times, gpu if query.gpu else None, query.group_by)
    latest = {key: points[max(points)] for key, points in per.items()}
    return latest, engine_labels(series, query.group_by)


async def _none() -> list[dict[str, object]]:
    return []


def _shift(reading: Reading, t0: float) -> Reading:
    return dataclasses.replace(reading, t=reading.t - t0)


async def watch_fleet(
    client: PrometheusClient,
    query: FleetQuery,
    config: MonitorConfig,
    *,
    duration_s: float | None = None,
    forget_after_s: float = FORGET_AFTER_S,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> AsyncGenerator[FleetEvent | FleetStart | CycleDone, None]:
    """Query the fleet every `config.interval_s` until `duration_s` (None: until stopped)."""
    await client.check()
    bank = FleetBank(config, gpu=query.gpu, forget_after_s=forget_after_s)
    t0 = clock()
    yield FleetStart(0.0, t0)
    tick = 0
    while True:
        target = tick * config.interval_s
        if duration_s is not None and target > duration_s:
            return
        delay = t0 + target - clock()
        if delay > 0:
            await sleep(delay)
        at = clock()
        try:
            latest, labels = await query_instant(client, query, at)
        except PrometheusError as exc:
            events = bank.failed(at - t0, str(exc))
        else:
            shifted = {key: _shift(r, t0) for key, r in latest.items()}
            events = bank.observe(at - t0, shifted, labels)
        for event in events:
            yield event
        yield CycleDone(at - t0)
        # A cycle slower than the interval skips the ticks it overran, not piles them up.
        tick = max(tick + 1, math.floor((clock() - t0) / config.interval_s) + 1)
