"""The time base on the wall clock: kit durations in their declared units, one conversion.

The simulator's GPU page averages utilisation over one wall second whatever its time scale,
so the detector's GPU window is a wall quantity: scaled like an engine duration it shrank to
1/scale of a second and the busy readings of the last second before a freeze restarted the
quiet period, reporting the onset late (27 engine s at 30x). Here the onset of a freeze is
found within one scrape of it and the stall starts within one scrape of `stall_after_s`.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import httpx
import pytest

from stallkit.contract.time import TimeBase, duration_unit
from stallkit.kits.arm.launchers import monitor_config
from stallkit.kits.arm.view import in_engine_time
from stallkit.kits.kit import load_kit
from stallkit.loadgen.config import LoadConfig
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import (
    DetectorState,
    Sample,
    StallStarted,
    StopRequested,
    Verdict,
)
from stallkit.monitor.live.watch import watch
from stallkit.monitor.signals.gpu import gpu_source
from stallkit.monitor.signals.parse import MetricsSnapshot
from stallkit.monitor.signals.rates import Deltas

#: float fields that are not durations (a share, a percentage, a rate)
NOT_DURATIONS = {
    "restart_spread",
    "request_rate",
    "idle_gpu_perc",
    "rate",
    "rate_end",
    "burstiness",
}


@pytest.mark.parametrize("model", [LoadConfig, MonitorConfig])
def test_every_duration_declares_its_unit(model: Any) -> None:
    for name, field in model.model_fields.items():
        if field.annotation in (float, float | None) and name not in NOT_DURATIONS:
            assert duration_unit(model, name) in ("engine", "wall"), name
        if name in NOT_DURATIONS:
            assert duration_unit(model, name) is None, name


def test_engine_durations_convert_and_wall_ones_stay() -> None:
    kit = load_kit("restore-stall")
    mon = monitor_config(kit, 30.0)
    assert mon.stall_after_s == pytest.approx(2.0)  # 60 engine s at 30x
    assert mon.gpu_window_s == kit.monitor.gpu_window_s  # a wall window: never scaled
    assert mon.scrape_timeout_s == kit.monitor.scrape_timeout_s
    assert TimeBase(30.0).to_engine(TimeBase(30.0).to_wall(600.0)) == pytest.approx(600.0)


def test_the_view_shows_monitor_events_in_engine_seconds() -> None:
    snap = MetricsSnapshot(running=4, waiting=6, gen_tokens=0.0)
    deltas = Deltas(0.5, 300.0, None, None, None, None, None, None)
    sample = in_engine_time(Sample(2.0, snap, deltas), 30.0)
    assert sample.t == 60.0 and sample.gen_tok_s == pytest.approx(20.0)  # 300 per 15 engine s
    stop = in_engine_time(StopRequested(10.0, 2.0, 8.0), 30.0)
    assert (stop.t, stop.onset, stop.stall_s) == (300.0, 60.0, 240.0)
    verdict = in_engine_time(Verdict(4.0, DetectorState("stalled", 2.0, 2.0, "spinning")), 30.0)
    assert (verdict.state.since, verdict.state.seconds) == (60.0, 60.0)


async def _stream(client: httpx.AsyncClient, url: str) -> None:
    body = {
        "model": "stallkit-sim",
        "messages": [{"role": "user", "content": "tell me about stalls " * 40}],
        "max_tokens": 100_000,
        "stream": True,
    }
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        async for _ in response.aiter_lines():
            pass


@pytest.mark.wallclock
@pytest.mark.parametrize(
    ("scale", "stall_after", "interval"),
    [(1.0, 3.0, 0.25), (30.0, 60.0, 3.0), (120.0, 240.0, 12.0)],
)
async def test_freeze_onset_within_one_scrape(
    sim_server: Any, scale: float, stall_after: float, interval: float
) -> None:
    """Timing-independent: judged on the samples the monitor actually took.

    The freeze comes 3 wall seconds in, so that tokens have moved at some scrape before it even
    when a loaded machine is slow to start the streams and the monitor.
    """
    overrides = {"monitor.stall_after_s": stall_after, "monitor.interval_s": interval}
    kit = load_kit("restore-stall", overrides | {"monitor.stop_after_s": stall_after * 2})
    mon = monitor_config(kit, scale)
    events: list[Any] = []
    async with (
        sim_server(time_scale=scale, freeze_at_s=3.0 * scale) as url,
        httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client,
    ):
        tasks = [asyncio.create_task(_stream(client, url)) for _ in range(2)]
        try:
            source = gpu_source(f"dcgm:{url}/dcgm/metrics")
            async for event in watch(url, mon, source, duration_s=10 + 2 * stall_after / scale):
                events.append(event)
                if isinstance(event, StallStarted):
                    break
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    stall = next((e for e in events if isinstance(e, StallStarted)), None)
    assert stall is not None, "no stall detected"
    samples = [e for e in events if isinstance(e, Sample)]
    moved = [
        b.t
        for a, b in itertools.pairwise(samples)
        if b.snapshot.gen_tokens != a.snapshot.gen_tokens
    ]
    assert moved, "no token before the freeze"
    # the onset is the last sample at which tokens moved: the GPU's last busy second (a wall
    # window) did not restart the quiet period
    assert stall.onset == moved[-1]
    # the stall starts at the first sample whose quiet period reaches stall_after engine s:
    # counted on the simulator's own clock (a frozen one keeps the wall's pace), never past
    # the wall's (the watch's times are wall seconds, `scale` engine s each)
    engine_s = {x.t: x.snapshot.sim_clock.engine_s for x in samples if x.snapshot.sim_clock}

    def quiet(t: float) -> float:
        return min(engine_s[t] - engine_s[stall.onset], (t - stall.onset) * scale)

    before = [x.t for x in samples if stall.onset < x.t < stall.t]
    assert engine_s[stall.t] - engine_s[stall.onset] >= stall_after
    assert quiet(stall.t) >= stall_after - 1e-6 * scale
    assert not before or quiet(before[-1]) < stall_after
