"""The monitor loop: an async generator of typed events (samples, GPU readings, stalls).

`watch()` checks the engine and starts the GPU source (either failing is a `MonitorError`
before the first event), then scrapes `/metrics` and reads the GPUs together on a fixed
schedule, feeds the detector and yields what happened. Consumers (the dashboard, the
timeline writer, the A/B runner) only read the events, so a slow terminal never delays a
scrape by more than the consumer's own handling; closing the generator (or leaving the
`async for`) stops the loop and releases the HTTP client and the GPU source. The clock and
the sleep are injectable; times in events are wall seconds since the monitor started. What
each tick's readings mean is the pure `stallkit.monitor.detect.step.MonitorStep`, which the virtual clock
drives too.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

import httpx

from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import MonitorEvent
from stallkit.monitor.detect.step import MonitorStep
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.signals.gpu import GpuReader
from stallkit.monitor.signals.scrape import MetricsScraper


async def _read_gpu(gpu: GpuReader) -> tuple[dict[str, float] | None, str | None]:
    if not gpu.checked:
        return {}, None
    try:
        return await gpu.read(), None
    except MonitorError as exc:
        return None, str(exc)


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
        step = MonitorStep(config, gpu.checked)
        cpu = engine_cpu or (lambda: None)
        cpu_s = await asyncio.to_thread(cpu)
        for event in step.events(0.0, first, util, engine_cpu_s=cpu_s):
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
            events = step.events(
                t,
                result.snapshot,
                reading,
                error=result.error,
                gpu_error=gpu_error,
                engine_cpu_s=cpu_s,
            )
            for event in events:
                yield event
            # A scrape slower than the interval skips the ticks it overran, not piles them up.
            tick = max(tick + 1, math.floor((clock() - t0) / config.interval_s) + 1)
    finally:
        await scraper.aclose()
        await gpu.close()
