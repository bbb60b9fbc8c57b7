"""Every fault the simulator plays, over HTTP: five simulators on port 0 at once, each with
two agents sending streaming requests one after another and a fault striking 3 wall seconds
in, each watched by the real monitor loop (its /metrics and its DCGM page): each stall named
with its kind soon after onset + stall_after. stall_after is twice the simulator's DCGM
averaging window, so the GPU reading the kind is judged on is past it. The five run in one
task group: one failing cancels the others and closes their servers.

Five simulators at 20x in one process fall behind their clocks on a slow or loaded machine
(a third of their scale at a load of 5 per core): their strikes come late on the wall, so a
watch ends once the strike is behind it on both the wall and the simulator's clock. A
simulator whose core runs dry while behind catches up with the wall at once, and a strike in
that leap finds the core idle: a core that stops then shows nothing pending (no stall to a
monitor without the clients), so the faults that stop it strike requests that outlast them."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from stallkit.engine.sim.config import FaultKind
from stallkit.engine.sim.faults import PLAYS
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import GpuReading, MonitorEvent, Sample, StallStarted
from stallkit.monitor.live.watch import watch
from stallkit.monitor.signals.gpu import gpu_source
from tests.conftest import SimServerFactory
from tests.machine import scaled
from tests.monitor.live.test_watch_sim import INTERVAL_S
from tests.serving import OUTLASTING_TOKENS, stream_chat

pytestmark = pytest.mark.wallclock

SCALE = 20.0
#: engine seconds: 3 wall seconds after the simulator starts on the idle reference machine,
#: load running by then; stretched by this machine's speed and load
AT_S = scaled(3.0) * SCALE
STALL_AFTER_S = 2.0  # the simulator's DCGM page averages the last wall second at 20x
CONFIG = MonitorConfig(
    interval_s=INTERVAL_S,
    stall_after_s=STALL_AFTER_S,
    stop_after_s=None,
    # one scrape over loopback: milliseconds on the idle reference machine; 2 s, stretched
    # by this machine's speed and load
    scrape_timeout_s=scaled(2.0),
)


async def _collect(url: str) -> list[MonitorEvent]:
    events: list[MonitorEvent] = []
    # ends at the stall: the strike, 1 s of drain (block), stall_after: 3 s after the strike
    # on the idle reference machine, so 6 s after it, stretched by this machine's speed and
    # load, on the wall and on the simulator's clock (behind the wall when it lags)
    after_s = scaled(6.0)
    struck_t: float | None = None  # the first sample past the strike on the simulator's clock
    gpu = gpu_source(f"dcgm:{url}/dcgm/metrics")
    async for event in watch(url, CONFIG, gpu):
        events.append(event)
        if isinstance(event, StallStarted):
            break
        clock = event.snapshot.sim_clock if isinstance(event, Sample) else None
        if clock is None or clock.engine_s < AT_S:
            continue
        struck_t = event.t if struck_t is None else struck_t
        if event.t - struck_t >= after_s and clock.engine_s >= AT_S + after_s * SCALE:
            break
    return events


async def _agent(client: httpx.AsyncClient, url: str, max_tokens: int) -> None:
    while True:  # requests one after another, as agents send them
        await stream_chat(client, url, max_tokens)


async def _watch(sim_server: SimServerFactory, fault: FaultKind) -> list[MonitorEvent]:
    config = {"time_scale": SCALE, "policy": "fix", "fault": {"kind": fault, "at_s": AT_S}}
    async with sim_server(**config) as url, httpx.AsyncClient(timeout=30.0) as client:
        # a blocked queue shows once the running requests drain: short ones for that fault;
        # the others strike with requests in flight, which outlast the strike
        max_tokens = 200 if fault == "block" else OUTLASTING_TOKENS
        agents = [asyncio.create_task(_agent(client, url, max_tokens)) for _ in range(2)]
        try:
            return await _collect(url)
        finally:
            for task in agents:
                task.cancel()
            await asyncio.gather(*agents, return_exceptions=True)


async def test_each_fault_over_http_is_caught_with_its_kind(sim_server: SimServerFactory) -> None:
    # a hidden freeze's gauges read idle: a monitor without the clients cannot see it (a run's
    # own agents do: tests/kits/arm/test_hidden_wedge.py)
    faults: list[FaultKind] = [f for f in PLAYS if f != "hidden_freeze"]
    async with asyncio.TaskGroup() as group:  # one failure cancels and closes the rest
        runs = [group.create_task(_watch(sim_server, f)) for f in faults]
    for fault, events in zip(faults, (run.result() for run in runs), strict=True):
        started = [e for e in events if isinstance(e, StallStarted)]
        assert [e.kind for e in started] == [PLAYS[fault]], fault
        stall = started[0]
        samples = [e for e in events if isinstance(e, Sample)]
        assert max(s.gen_tok_s for s in samples) > 0, fault  # tokens flowed before the strike
        # onset at the strike on the simulator's own clock (block: once the running drain),
        # the stall judged stall_after later, within a few scrape intervals
        clock = [(s.t, s.snapshot.sim_clock.engine_s) for s in samples if s.snapshot.sim_clock]
        at = next(i for i, (t, _) in enumerate(clock) if t == stall.onset)
        drain_s = SCALE if fault == "block" else 0.0
        # the onset is the last sample with progress: the one before it was taken before the
        # strike, the one after it after
        assert clock[at - 1][1] <= AT_S + drain_s <= clock[at + 1][1] + drain_s, fault
        # the quiet period is counted on the simulator's clock, never past the wall's (a
        # stopped core's clock leaps by the lag it had, at once or as it catches up): the
        # stall is judged at the first sample with stall_after of it, which came at most a
        # second after the one before (scrapes every 0.1 s; five simulators share two cores
        # of the idle reference machine), stretched by this machine's speed and load
        judged = next(i for i, (t, _) in enumerate(clock) if t == stall.t)
        before, then = (
            min((engine_s - clock[at][1]) / SCALE, t - stall.onset)
            for t, engine_s in clock[judged - 1 : judged + 1]
        )
        delay_s = then - STALL_AFTER_S
        print(f"{fault}: {stall.kind} judged {delay_s:+.2f} s (quiet on both clocks) after "
              f"onset + stall_after ({STALL_AFTER_S:g} s, scrapes every {INTERVAL_S:g} s)")  # fmt: skip
        assert before < STALL_AFTER_S <= then, (fault, before, then)
        assert clock[judged][0] - clock[judged - 1][0] <= scaled(1.0), fault
        if fault == "busy_hang":  # the simulator's DCGM page shows its GPUs busy
            gpu = [e for e in events if isinstance(e, GpuReading)][-1]
            assert min(gpu.util.values()) >= 90, gpu
