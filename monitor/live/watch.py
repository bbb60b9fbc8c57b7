"""Watch one engine: an async generator of typed events (samples, GPU readings, stalls).

`watch()` checks the engine and starts the GPU source (either failing is a `MonitorError`
before the first event), then scrapes `/metrics` and reads the GPUs together on a fixed
schedule, feeds the detector and yields what happened. Consumers (the dashboard, the
timeline writer, the A/B runner) only read the events, so a slow terminal never delays a
scrape by more than the consumer's own handling; closing the generator (or leaving the
`async for`) stops the loop and releases the HTTP client and the GPU source. The clock and
the sleep are injectable; times in events are wall seconds since the monitor started. The
schedule is the one monitor loop (`stallkit.monitor.live.loop`); this module is its source
for one engine (`EngineSource`), and what each tick's readings mean is the pure
`stallkit.monitor.detect.step.MonitorStep`, which the virtual clock drives too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

import httpx

from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import MonitorEvent
from stallkit.monitor.detect.step import MonitorStep
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.live.loop import run_loop
from stallkit.monitor.signals.dialects import Dialect
from stallkit.monitor.signals.gpu import GpuReader
from stallkit.monitor.signals.scrape import MetricsScraper

__all__ = ["EngineSource", "watch"]


def _no_cpu() -> float | None:
    return None


def _no_clients() -> int:
    return 0


async def _read_gpu(gpu: GpuReader) -> tuple[dict[str, float] | None, str | None]:
    if not gpu.checked:
        return {}, None
    try:
        return await gpu.read(), None
    except MonitorError as exc:
        return None, str(exc)


class EngineSource:
    """One engine over HTTP, as the loop's source: `/metrics`, the GPUs and the engine's CPU
    seconds read together each tick, into one `MonitorStep`.

    Its start is a reading: the engine's check scrape and the GPU source's first reading
    are the events at `t` = 0. The HTTP client is made at the start, so a watch never
    iterated holds nothing.
    """

    read_at_start = True

    def __init__(
        self,
        url: str,
        config: MonitorConfig,
        gpu: GpuReader,
        *,
        client: httpx.AsyncClient | None = None,
        engine_cpu: Callable[[], float | None] | None = None,
        client_pending: Callable[[], int] | None = None,
        dialect: Dialect | None = None,
    ) -> None:
        self.url, self.config, self.gpu = url, config, gpu
        self.dialect = dialect  # None: the first page's own
        self._client = client
        self._cpu = engine_cpu or _no_cpu
        self._client_pending = client_pending or _no_clients
        self._scraper: MetricsScraper | None = None
        self._step: MonitorStep | None = None

    async def check(self) -> None:
        """Nothing before the clock: the engine's check is timed as the first tick."""

    async def start(self, t0: float) -> list[MonitorEvent]:
        """Check the engine, start the GPU source; the events of that first reading."""
        timeout_s = self.config.scrape_timeout_s
        self._scraper = MetricsScraper(
            self.url, timeout_s=timeout_s, client=self._client, dialect=self.dialect
        )
        first = await self._scraper.check_engine()
        util = await self.gpu.start()
        self._step = MonitorStep(self.config, self.gpu.checked)
        cpu_s = await asyncio.to_thread(self._cpu)
        return self._step.events(0.0, first, util, engine_cpu_s=cpu_s)

    async def read(self, t: float, at: float) -> list[MonitorEvent]:
        """Scrape, read the GPUs and the CPU seconds together; the step's events at `t`."""
        if self._scraper is None or self._step is None:
            raise RuntimeError("EngineSource.read before start")
        result, (reading, gpu_error), cpu_s = await asyncio.gather(
            self._scraper.scrape(), _read_gpu(self.gpu), asyncio.to_thread(self._cpu)
        )
        return self._step.events(
            t,
            result.snapshot,
            reading,
            error=result.error,
            gpu_error=gpu_error,
            engine_cpu_s=cpu_s,
            client_pending=self._client_pending(),
            activity=self.gpu.activity if gpu_error is None else None,
            unanswered=result.unanswered,
        )

    async def aclose(self) -> None:
        """Close the HTTP client (when owned) and the GPU source."""
        if self._scraper is not None:
            await self._scraper.aclose()
        await self.gpu.close()


def watch(
    url: str,
    config: MonitorConfig,
    gpu: GpuReader,
    *,
    duration_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    client: httpx.AsyncClient | None = None,
    engine_cpu: Callable[[], float | None] | None = None,
    client_pending: Callable[[], int] | None = None,
    dialect: Dialect | None = None,
) -> AsyncGenerator[MonitorEvent, None]:
    """Watch the engine at `url` until `duration_s` (None: until the caller stops).

    `engine_cpu`, when given, reads the engine's cumulative CPU seconds (None when unknown);
    the detector uses it to tell a spinning engine from a frozen one. `client_pending`, when
    given, counts the requests the run's own clients have sent and still wait on: pending
    work the engine's gauges may hide. `dialect`: the page's metric dialect (None: told
    apart from the first page).

    Takes ownership of `gpu` (starts and closes it). Raises `MonitorError` before the first
    event when the engine does not answer with vLLM metrics or the GPU source fails.
    """
    source = EngineSource(
        url,
        config,
        gpu,
        client=client,
        engine_cpu=engine_cpu,
        client_pending=client_pending,
        dialect=dialect,
    )
    return run_loop(source, config.interval_s, duration_s=duration_s, clock=clock, sleep=sleep)
