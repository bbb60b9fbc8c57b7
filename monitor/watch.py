"""The monitor loop: an async generator of typed events (samples, GPU readings, stalls).

`watch()` checks the engine and starts the GPU source (either failing is a `MonitorError`
before the first event), then scrapes `/metrics` and reads the GPUs together on a fixed
schedule, feeds the detector and yields what happened. Consumers (the dashboard, the
timeline writer, the A/B runner) only read the events, so a slow terminal never delays a
scrape by more than the consumer's own handling; closing the generator (or leaving the
`async for`) stops the loop and releases the HTTP client and the GPU source. The clock and
the sleep are injectable; times in events are wall seconds since the monitor started.
A simulator states its own engine clock on its page, which falls behind its time scale when
it is starved of CPU: the detector measures quiet periods on that clock (in the same unit,
engine seconds over the scale), so a lagging simulator is not read as a stall; a real
engine's clock is the wall's.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

import httpx

from contract.time import TimeBase
from monitor.config import MonitorConfig
from monitor.detector import StallDetector
from monitor.errors import MonitorError
from monitor.events import Down, GpuReading, MonitorEvent, Sample, Up, Verdict
from monitor.gpu import GpuReader
from monitor.parse import MetricsSnapshot
from monitor.rates import snapshot_deltas
from monitor.scrape import MetricsScraper, ScrapeResult


async def _read_gpu(gpu: GpuReader) -> tuple[dict[str, float] | None, str | None]:
    if not gpu.checked:
        return {}, None
    try:
        return await gpu.read(), None
    except MonitorError as exc:
        return None, str(exc)


class _Loop:
    """The per-run state of `watch()`: the detector, the last snapshot, down/up tracking."""

    def __init__(self, detector: StallDetector, gpu_checked: bool) -> None:
        self.detector = detector
        self.gpu_checked = gpu_checked
        self.prev: tuple[float, MetricsSnapshot] | None = None
        self.down_since: float | None = None
        # the simulator's clock at the first sample that stated it: (engine seconds, its t)
        self.sim_origin: tuple[float, float] | None = None

    def engine_t(self, t: float, snapshot: MetricsSnapshot) -> float | None:
        """The engine's own clock at this sample, in the monitor's unit (None: the wall's).

        The simulator's engine seconds since the first sample that stated them, converted
        with its time scale, counted from that sample's `t`. Only differences matter: a
        restarted simulator's clock starts again, after the failed scrapes that reset the
        detector.
        """
        clock = snapshot.sim_clock
        if clock is None:
            return None
        if self.sim_origin is None:
            self.sim_origin = (clock.engine_s, t)
        origin_s, origin_t = self.sim_origin
        return origin_t + TimeBase(clock.scale).to_wall(clock.engine_s - origin_s)

    def events(
        self,
        t: float,
        result: ScrapeResult,
        util: dict[str, float] | None,
        gpu_error: str | None,
        engine_cpu_s: float | None = None,
    ) -> list[MonitorEvent]:
        out: list[MonitorEvent] = []
        if self.gpu_checked:
            out.append(GpuReading(t, util or {}, gpu_error))
        snapshot = result.snapshot
        if snapshot is None:
            out.append(Down(t, result.error or "unknown error"))
            self.prev = None
            if self.down_since is None:
                self.down_since = t
        else:
            if self.down_since is not None:
                out.append(Up(t, t - self.down_since))
                self.down_since = None
            deltas = None
            if self.prev is not None:
                deltas = snapshot_deltas(self.prev[1], snapshot, t - self.prev[0])
            out.append(Sample(t, snapshot, deltas))
            self.prev = (t, snapshot)
        engine_t = None if snapshot is None else self.engine_t(t, snapshot)
        out.extend(self.detector.observe(t, snapshot, util, engine_cpu_s, engine_t))
        out.append(Verdict(t, self.detector.state))
        return out


async def watch(
    url: str,
    config: MonitorConfig,
    gpu: GpuReader,
    *,
    duration_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    client: httpx.AsyncClient | None = None,
    engine_cpu: Callable[[], float | None] | None = None,
) -> AsyncGenerator[MonitorEvent, None]:
    """Watch the engine at `url` until `duration_s` (None: until the caller stops).

    `engine_cpu`, when given, reads the engine's cumulative CPU seconds (None when unknown);
    the detector uses it to tell a spinning engine from a frozen one.

    Takes ownership of `gpu` (starts and closes it). Raises `MonitorError` before the first
    event when the engine does not answer with vLLM metrics or the GPU source fails.
    """
    scraper = MetricsScraper(url, timeout_s=config.scrape_timeout_s, client=client)
    try:
        t0 = clock()
        first = await scraper.check_engine()
        util = await gpu.start()
        loop = _Loop(StallDetector(config, gpu_checked=gpu.checked), gpu.checked)
        cpu = engine_cpu or (lambda: None)
        for event in loop.events(
            0.0, ScrapeResult(first), util, None, await asyncio.to_thread(cpu)
        ):
            yield event
        tick = 1
        while True:
            target = tick * config.interval_s
            if duration_s is not None and target > duration_s:
                return
            delay = t0 + target - clock()
            if delay > 0:
                await sleep(delay)
            t = clock() - t0
            result, (reading, gpu_error), cpu_s = await asyncio.gather(
                scraper.scrape(), _read_gpu(gpu), asyncio.to_thread(cpu)
            )
            for event in loop.events(t, result, reading, gpu_error, cpu_s):
                yield event
            # A scrape slower than the interval skips the ticks it overran, not piles them up.
            tick = max(tick + 1, math.floor((clock() - t0) / config.interval_s) + 1)
    finally:
        await scraper.aclose()
        await gpu.close()
