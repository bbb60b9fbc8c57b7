"""The monitor loop against the simulator on port 0: freeze -> frozen stall, /metrics fault
-> down, healthy load -> no stall, a starved simulator's lag -> no stall. Load is a couple of
plain streaming requests."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from stallkit.contract import names
from stallkit.engine.serve.metrics import SimMetrics
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.core import SimEngine
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import (
    Down,
    GpuReading,
    MonitorEvent,
    Sample,
    StallEnded,
    StallStarted,
    Up,
    Verdict,
)
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.live.session import run_monitor
from stallkit.monitor.live.watch import watch
from stallkit.monitor.signals.gpu import gpu_source
from tests.machine import scaled
from tests.serving import asgi_server
from tests.serving import chat_load as load

pytestmark = pytest.mark.wallclock

SimServer = Callable[..., AbstractAsyncContextManager[str]]
INTERVAL_S = 0.1
STALL_AFTER_S = 1.0
CONFIG = MonitorConfig(
    interval_s=INTERVAL_S,
    stall_after_s=STALL_AFTER_S,
    stop_after_s=None,
    # one scrape over loopback: milliseconds on the idle reference machine; 2 s, stretched
    # by this machine's speed and load
    scrape_timeout_s=scaled(2.0),
)


class VirtualClock:
    """A watch's clock and sleep where only the order of the scrapes matters: time moves
    only when the loop sleeps, so a loaded machine skips no tick."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay_s: float) -> None:
        self.now += delay_s
        await asyncio.sleep(0)  # let the server (and anything else in the loop) run


async def collect(
    url: str,
    duration_s: float,
    until: type | None = None,
    gpu: str = "dcgm",
    clock: VirtualClock | None = None,
) -> list[MonitorEvent]:
    source = gpu_source(f"dcgm:{url}/dcgm/metrics" if gpu == "dcgm" else gpu)
    events: list[MonitorEvent] = []
    stream = (
        watch(url, CONFIG, source, duration_s=duration_s)
        if clock is None
        else watch(url, CONFIG, source, duration_s=duration_s, clock=clock, sleep=clock.sleep)
    )
    async for event in stream:
        events.append(event)
        if until is not None and isinstance(event, until):
            break
    return events


@contextlib.asynccontextmanager
async def page_server(respond: Callable[[], tuple[int, str]]) -> AsyncIterator[str]:
    """A real HTTP server on 127.0.0.1 port 0 answering every request with `respond()`."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        status, body = respond()
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": body.encode()})

    async with asgi_server(app) as url:
        yield url


def starved_sim_page(with_clock: bool) -> Callable[[], tuple[int, str]]:
    """The simulator's own /metrics for a request that waits and gets no token, its engine
    clock 0.05 s further at each scrape: at 20x, a fortieth of the 2 engine s a scrape interval
    holds (a simulator starved of CPU). Without its clock's gauges: a real engine's page."""
    config = SimConfig()
    engine = SimEngine(config)
    engine.add_request("starved", ["word"] * 64, 16, now_s=0.0)
    metrics = SimMetrics(config, time_scale=20.0)
    scrapes = itertools.count(1)
    own = (names.SIM_ENGINE_TIME, names.SIM_TIME_SCALE)

    def respond() -> tuple[int, str]:
        text = metrics.render(engine.stats, 0.05 * next(scrapes)).decode()
        if not with_clock:
            text = "\n".join(x for x in text.splitlines() if not any(n in x for n in own))
        return 200, text + "\n"

    return respond


@pytest.mark.parametrize("with_clock", [True, False], ids=["simulator", "real-engine"])
async def test_a_starved_simulators_lag_is_not_a_stall_where_a_real_engines_quiet_is(
    with_clock: bool,
) -> None:
    async with page_server(starved_sim_page(with_clock)) as url:
        # stall_after (1 s) and room for the first stall: 2.5 s on the idle reference machine
        events = await collect(url, duration_s=scaled(2.5), until=StallStarted, gpu="none")
    samples = [e for e in events if isinstance(e, Sample)]
    assert all(s.snapshot.waiting == 1 and s.gen_tok_s == 0 for s in samples)
    assert (samples[0].snapshot.sim_clock is not None) == with_clock
    started = [e for e in events if isinstance(e, StallStarted)]
    if with_clock:
        # more than stall_after of wall time without a token: on its own clock, a few ms
        assert samples[-1].t > STALL_AFTER_S and not started
        assert {e.state.status for e in events if isinstance(e, Verdict)} == {"ok", "suspect"}
    else:
        # nothing on the page moves: its gauges read blocked, but a core that does not step
        # is frozen (a blocked core steps over the request it cannot admit)
        assert [(e.kind, e.onset) for e in started] == [("frozen", 0.0)]
        assert started[0].t >= STALL_AFTER_S


async def test_freeze_is_a_frozen_stall_within_stall_after_plus_two_intervals(
    sim_server: SimServer,
) -> None:
    scale, freeze_at = 20.0, 20.0  # the engine freezes 1 wall second after it starts
    async with (
        sim_server(time_scale=scale, freeze_at_s=freeze_at) as url,
        load(url, 2, max_tokens=50_000),
    ):
        # ends at the stall, about 2 s in on the idle reference machine
        events = await collect(url, duration_s=scaled(8.0), until=StallStarted)
    started = [e for e in events if isinstance(e, StallStarted)]
    assert len(started) == 1, [type(e).__name__ for e in events]
    stall = started[0]
    assert stall.kind == "frozen" and stall.gpu_checked
    samples = [e for e in events if isinstance(e, Sample)]
    assert max(s.gen_tok_s for s in samples) > 0  # tokens flowed before the freeze
    assert stall.onset_snapshot.running == 2
    # The monitor started after the engine, so the freeze is at most this far into its run.
    # two intervals of slack for the scrapes on the idle reference machine, stretched by this
    # machine's speed and load (a loaded loop skips the ticks it overran)
    freeze_wall = freeze_at / scale
    assert stall.t <= freeze_wall + STALL_AFTER_S + scaled(2 * INTERVAL_S)
    # the quiet period is counted on the simulator's clock (a frozen one keeps the wall's pace)
    engine_s = {s.t: s.snapshot.sim_clock.engine_s for s in samples if s.snapshot.sim_clock}
    assert engine_s[stall.t] - engine_s[stall.onset] >= STALL_AFTER_S * scale
    gpu = [e for e in events if isinstance(e, GpuReading)]
    assert set(gpu[-1].util) == {"0", "1"} and max(gpu[-1].util.values()) <= 5


async def test_metrics_fault_is_down_not_a_stall(sim_server: SimServer) -> None:
    # /metrics fails 0.5 s in on the idle reference machine, after the watch's first scrape;
    # stretched by this machine's speed and load, so the first scrape still comes before it
    scale, fail_at_s = 20.0, scaled(0.5)
    async with (
        sim_server(time_scale=scale, fail_metrics_at_s=fail_at_s * scale) as url,
        load(url, 2, max_tokens=50_000),
    ):
        # down from 0.5 s in, judged down stall_after later: 2.5 s on the idle reference
        # machine (a starved simulator's clock, which the fault keeps, falls behind)
        events = await collect(url, duration_s=fail_at_s + scaled(2.0))
    downs = [e for e in events if isinstance(e, Down)]
    assert downs and all("503" in d.error for d in downs)
    assert not any(isinstance(e, StallStarted | StallEnded) for e in events)
    verdicts = [e for e in events if isinstance(e, Verdict)]
    assert verdicts[-1].state.status == "down"
    assert verdicts[-1].state.seconds >= STALL_AFTER_S  # down long enough to have been one


async def test_healthy_run_has_no_stall(sim_server: SimServer) -> None:
    async with sim_server(time_scale=20.0) as url, load(url, 2, max_tokens=600) as tasks:
        # 600 tokens at 20x finish within 3 s on the idle reference machine
        events = await collect(url, duration_s=scaled(3.0))
        finished = [t.result() for t in tasks if t.done() and not t.cancelled()]
    assert finished and all(n > 0 for n in finished)
    assert not any(isinstance(e, StallStarted) for e in events)
    samples = [e for e in events if isinstance(e, Sample)]
    assert max(s.gen_tok_s for s in samples) > 0
    statuses = {e.state.status for e in events if isinstance(e, Verdict)}
    assert "stalled" not in statuses and "idle" in statuses  # the requests finished


async def test_run_monitor_writes_the_timeline_and_exits_on_stall(
    sim_server: SimServer, tmp_path: Path
) -> None:
    # the freeze comes once the load is in flight: 0.5 s in on the idle reference machine,
    # stretched by this machine's speed and load (a freeze before the load is no stall)
    async with (
        sim_server(time_scale=20.0, freeze_at_s=scaled(0.5) * 20.0) as url,
        load(url, 2, max_tokens=50_000),
    ):
        outcome = await run_monitor(
            url,
            CONFIG,
            gpu_source("none"),
            out_dir=tmp_path,
            duration_s=scaled(8.0),  # ends at the stall, about 2 s in (idle reference machine)
            display="none",
            exit_on_stall=True,
        )
    assert outcome.exited_on_stall and [s.kind for s in outcome.stalls] == ["frozen"]
    assert not outcome.stalls[0].gpu_checked
    lines = [json.loads(x) for x in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    assert lines[-1]["type"] == "stall_started" and lines[-1]["gpu_checked"] is False
    assert {x["type"] for x in lines} == {"sample", "stall_started"}


async def test_unreachable_engine_and_bad_gpu_source_fail_at_start(
    sim_server: SimServer,
) -> None:
    with pytest.raises(MonitorError, match="cannot read engine metrics"):
        await collect("http://127.0.0.1:9", duration_s=1.0, gpu="none")
    async with sim_server() as url:
        with pytest.raises(MonitorError, match="dcgm"):
            await collect(url, duration_s=1.0, gpu="dcgm:http://127.0.0.1:9/metrics")


async def test_engine_coming_back_yields_up() -> None:
    # A real server that answers 503 for a while, then serves a recorded page.
    page = (Path(__file__).parents[1] / "data" / "vllm-0.32-one-engine.txt").read_text()
    calls = itertools.count(1)

    def respond() -> tuple[int, str]:
        return (503 if 2 <= next(calls) <= 4 else 200), page

    async with page_server(respond) as url:
        events = await collect(url, duration_s=0.75, gpu="none", clock=VirtualClock())
    kinds = [type(e).__name__ for e in events if not isinstance(e, Verdict)]
    assert kinds[:5] == ["Sample", "Down", "Down", "Down", "Up"]
    up = next(e for e in events if isinstance(e, Up))
    assert up.down_s > 0
