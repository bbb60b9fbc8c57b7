"""Watch a fleet through Prometheus: query every interval, feed the bank, yield fleet events.

`watch_fleet()` checks that the server answers (a `MonitorError` before the first event
otherwise), then at each interval asks Prometheus for the engines' series, their scrape
times and their GPUs at that instant (three queries, whatever the fleet's size), turns the
answers into per-engine readings (`stallkit.monitor.prometheus.queries`) and feeds
`stallkit.monitor.fleet.bank.FleetBank`, yielding what happened. A query that fails is a
failed scrape of every engine, and the loop goes on. Times in events are seconds since the
watch started (Unix time minus `t0_unix`, the first line of `fleet.jsonl`). The schedule is
the one monitor loop (`stallkit.monitor.live.loop`); this module is its source for a fleet
(`FleetSource`). The clock and the sleep are injectable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.fleet.bank import FORGET_AFTER_S, FleetBank, FleetEvent
from stallkit.monitor.live.loop import run_loop
from stallkit.monitor.prometheus.client import PrometheusClient, PrometheusError
from stallkit.monitor.prometheus.queries import (
    FleetQuery,
    Reading,
    client_pending,
    engine_labels,
    readings,
)


@dataclasses.dataclass(frozen=True, slots=True)
class FleetStart:
    """The watch's first event: the Unix time its `t` = 0 stands for."""

    t: float
    t0_unix: float


@dataclasses.dataclass(frozen=True, slots=True)
class CycleDone:
    """Every engine read at this cycle has had its events (for summaries)."""

    t: float


#: Everything a fleet watch yields.
AnyFleetEvent = FleetEvent | FleetStart | CycleDone


async def query_instant(
    client: PrometheusClient, query: FleetQuery, at: float
) -> tuple[dict[str, Reading], dict[str, dict[str, str]]]:
    """Every engine's latest reading at Unix time `at`, and its labels (raises
    `PrometheusError`)."""
    series, times, gpu, pending = await asyncio.gather(
        client.query(query.series(), at),
        client.query(query.times(), at),
        client.query(query.gpus(), at) if query.gpu else _none(),
        client.query(query.pending, at) if query.pending else _none(),
    )
    per = readings(series, times, gpu if query.gpu else None, query.group_by, query.dialect)
    latest = {key: points[max(points)] for key, points in per.items()}
    labels = engine_labels(series, query.group_by)
    waiting = client_pending(pending, query.group_by)
    for key, count in waiting.items():
        if key in latest:
            latest[key] = dataclasses.replace(latest[key], client_pending=count)
    return latest, labels


async def check_pending(client: PrometheusClient, expr: str) -> None:
    """Raise a one-line `MonitorError` when Prometheus refuses `expr` as a query (400
    bad_data: it does not parse, or is not valid PromQL)."""
    try:
        await client.query(expr)
    except PrometheusError as exc:
        if exc.error_type != "bad_data":
            raise
        # "URL: HTTP 400: invalid parameter "query": 1:8: parse error: ..." -> from "1:8"
        why = str(exc).split(": ", 2)[-1].removeprefix('invalid parameter "query": ')
        raise MonitorError(
            f"--pending-query {expr!r} is not a query Prometheus takes: {why}",
            hint="a PromQL expression whose series carry the group label, e.g. "
            "sum by (instance) (dynamo_frontend_inflight_requests)",
        ) from None


async def _none() -> list[dict[str, object]]:
    return []


def _shift(reading: Reading, t0: float) -> Reading:
    return dataclasses.replace(reading, t=reading.t - t0)


class FleetSource:
    """A fleet through Prometheus, as the loop's source: three instant queries each tick,
    into one `FleetBank`. Its start only announces `t0`; the first query is at once."""

    read_at_start = False

    def __init__(
        self,
        client: PrometheusClient,
        query: FleetQuery,
        config: MonitorConfig,
        *,
        forget_after_s: float = FORGET_AFTER_S,
    ) -> None:
        self.client, self.query = client, query
        self.bank = FleetBank(config, gpu=query.gpu, forget_after_s=forget_after_s)
        self._t0 = 0.0

    async def check(self) -> None:
        """The server answers, and takes the pending query (raises `MonitorError` otherwise)."""
        await self.client.check()
        if self.query.pending:
            await check_pending(self.client, self.query.pending)

    async def start(self, t0: float) -> list[AnyFleetEvent]:
        """The `FleetStart` that ties `t` = 0 to Unix time `t0`."""
        self._t0 = t0
        return [FleetStart(0.0, t0)]

    async def read(self, t: float, at: float) -> list[AnyFleetEvent]:
        """Every engine at Unix time `at` into the bank; its events, then `CycleDone`."""
        events: list[AnyFleetEvent] = []
        try:
            latest, labels = await query_instant(self.client, self.query, at)
        except PrometheusError as exc:
            events.extend(self.bank.failed(t, str(exc)))
        else:
            shifted = {key: _shift(r, self._t0) for key, r in latest.items()}
            events.extend(self.bank.observe(t, shifted, labels))
        events.append(CycleDone(t))
        return events

    async def aclose(self) -> None:
        """Nothing to release: the client is the caller's."""


def watch_fleet(
    client: PrometheusClient,
    query: FleetQuery,
    config: MonitorConfig,
    *,
    duration_s: float | None = None,
    forget_after_s: float = FORGET_AFTER_S,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> AsyncGenerator[AnyFleetEvent, None]:
    """Query the fleet every `config.interval_s` until `duration_s` (None: until stopped)."""
    source = FleetSource(client, query, config, forget_after_s=forget_after_s)
    return run_loop(source, config.interval_s, duration_s=duration_s, clock=clock, sleep=sleep)
