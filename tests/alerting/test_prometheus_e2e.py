"""A real Prometheus on loopback scraping four simulators (three playing a stall: frozen,
blocked, busy hang; one healthy) with the generated rules loaded: through its HTTP API each
stalled engine's alert goes pending then firing with its kind, the healthy one's never
appears. stallkit's detector watches the frozen engine in the same run, so the alert's delay
after the detector's onset is measured (printed; bounds asserted loosely, never tightly on
timing)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import httpx
import pytest

from stallkit.engine.sim.config import FaultKind
from stallkit.engine.sim.faults import PLAYS
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import StallStarted
from stallkit.monitor.live.watch import watch
from stallkit.monitor.prometheus.rules import RulesSettings, rules_yaml
from stallkit.monitor.signals.gpu import gpu_source
from tests.alerting.alerting_support import (
    prometheus,
    sim_engine_s,
    sim_process,
    streaming_load,
    tool,
    wait_engine_s,
)
from tests.machine import scaled
from tests.serving import OUTLASTING_TOKENS

pytestmark = pytest.mark.wallclock

SCRAPE_S = 0.2
STALL_AFTER_S = 1.0
SCALE = 10.0
#: simulator -> the fault it plays, or none; the healthy one first, so the stalled ones'
#: strikes come as late after the load's start as they can
ENGINES: dict[str, FaultKind | None] = {
    "healthy": None,
    "frozen": "freeze",
    "blocked": "block",
    "busy_hang": "busy_hang",
}


def strike_at_s() -> float:
    """Engine seconds after each simulator starts: the four start one after another, then
    Prometheus, and the load must be on by then: about 6 s on the idle reference machine, so
    12 s, stretched by this machine's speed and load (a strike before the load freezes an
    idle engine, which is no stall; so does one after it, hence requests that outlast it)."""
    return scaled(12.0) * SCALE


def _rules(tmp: Path) -> Path:
    settings = RulesSettings(
        stall_after_s=STALL_AFTER_S,
        scrape_interval_s=SCRAPE_S,
        evaluation_interval_s=SCRAPE_S,
        gpu_match_labels="instance",  # each simulator serves its own GPUs' DCGM page
    )
    (tmp / "rules.yml").write_text(rules_yaml(settings))
    return tmp / "rules.yml"


async def _healthy_load(url: str) -> None:
    while True:  # short requests back to back: busy, never stalled
        async with streaming_load(url, 2, max_tokens=300):
            await asyncio.sleep(0.5)


async def _detector_onset(url: str) -> tuple[float, StallStarted]:
    config = MonitorConfig(
        interval_s=SCRAPE_S, stall_after_s=STALL_AFTER_S, stop_after_s=None, gpu_window_s=0.0
    )
    t0 = time.time()
    async for event in watch(url, config, gpu_source(f"dcgm:{url}/dcgm/metrics")):
        if isinstance(event, StallStarted):
            return t0, event
    raise AssertionError("the watch ended")


Seen = dict[str, list[tuple[float, str, str]]]


async def _strikes(urls: list[str], strike_s: float) -> None:
    """Until every simulator at `urls` has its strike behind it, on its own clock."""
    for url in urls:
        await asyncio.to_thread(wait_engine_s, url, strike_s)


async def _alert_states(
    prom: str, deadline_s: float, stalled: set[str], struck: asyncio.Task[None]
) -> Seen:
    """instance -> [(wall time, state, kind)] of EngineStalled until every instance in
    `stalled` has a firing one, or `deadline_s` after `struck` is done (the strikes behind
    every stalled simulator: one starved of CPU falls behind its clock, and its strike comes
    late on the wall). Polled from the start, so no pending state passes unseen."""
    seen: Seen = {}
    # one query over loopback: milliseconds on the idle reference machine
    async with httpx.AsyncClient(timeout=scaled(2.0)) as client:
        end: float | None = None
        while end is None or time.monotonic() < end:
            if end is None and struck.done():
                struck.result()  # its error, if it failed
                end = time.monotonic() + deadline_s
            body = (await client.get(f"{prom}/api/v1/alerts")).json()
            now = time.time()
            for alert in body["data"]["alerts"]:
                labels = alert["labels"]
                if labels["alertname"] == "EngineStalled":
                    row = (now, alert["state"], labels["kind"])
                    seen.setdefault(labels["instance"], []).append(row)
            fired = {i for i, rows in seen.items() if any(r[1] == "firing" for r in rows)}
            if stalled <= fired:
                return seen
            await asyncio.sleep(0.05)
    return seen


@pytest.mark.slow
async def test_prometheus_alerts_fire_with_the_kind_of_each_stalled_arm_only(
    tmp_path: Path,
) -> None:
    tool("prometheus")
    strike_s = strike_at_s()
    with contextlib.ExitStack() as stack:
        sims = {
            name: stack.enter_context(
                sim_process(tmp_path, SCALE, name, *(["--fault", f"{f}@{strike_s:g}"] if f else []))
            )
            for name, f in ENGINES.items()
        }
        hosts = {name: sim.url.removeprefix("http://") for name, sim in sims.items()}
        with prometheus(tmp_path, list(hosts.values()), _rules(tmp_path), SCRAPE_S) as prom:
            # requests in flight past the strike where the engine stops; short ones back to
            # back where a queue must drain (blocked) or nothing may stall (healthy)
            loads = [
                streaming_load(sims[n].url, 2, max_tokens=OUTLASTING_TOKENS)
                for n in ("frozen", "busy_hang")
            ]
            async with loads[0], loads[1]:
                tasks = [
                    asyncio.create_task(_healthy_load(sims[n].url)) for n in ("blocked", "healthy")
                ]
                detector = asyncio.create_task(_detector_onset(sims["frozen"].url))
                try:
                    at_s = await asyncio.to_thread(sim_engine_s, sims["frozen"].url)
                    assert at_s < strike_s, f"set up too slow: load on at {at_s:g} engine s"
                    stalled = {hosts[n] for n, fault in ENGINES.items() if fault}
                    urls = [sims[n].url for n, fault in ENGINES.items() if fault]
                    struck = asyncio.create_task(_strikes(urls, strike_s))
                    tasks.append(struck)
                    # each alert fires about 2 s after its strike (idle reference machine):
                    # 40 s after the strikes, as long as when it counted their 12 s too,
                    # stretched likewise
                    seen = await _alert_states(prom, scaled(40.0), stalled, struck)
                    # the detector names the stall about when the alerts fire (idle: < 1 s)
                    t0, started = await asyncio.wait_for(detector, scaled(10.0))
                finally:
                    for task in [*tasks, detector]:
                        task.cancel()
                    await asyncio.gather(*tasks, detector, return_exceptions=True)
    for name, fault in ENGINES.items():
        rows = seen.get(hosts[name], [])
        if fault is None:
            assert rows == [], seen  # the healthy engine: no alert in any state
            continue
        states = [state for _t, state, _k in rows]
        assert "pending" in states and "firing" in states, (name, seen)
        assert states.index("pending") < states.index("firing"), (name, rows)
        assert {kind for _t, state, kind in rows if state == "firing"} == {PLAYS[fault]}, rows
    assert started.kind == "frozen"
    fired_at = next(t for t, state, _k in seen[hosts["frozen"]] if state == "firing")
    onset_wall = t0 + started.onset
    delay = fired_at - onset_wall
    print(f"alert firing {delay:.2f} s after the detector's onset (stall_after {STALL_AFTER_S} s, "
          f"scrape/eval {SCRAPE_S} s); detector stall started {started.t - started.onset:.2f} s "
          "after onset")  # fmt: skip
    # one scrape to see the counter quiet, up to one evaluation, polling: under 3 s late with
    # four simulators, their load and Prometheus sharing two cores (idle reference machine),
    # stretched by this machine's speed and load
    assert STALL_AFTER_S <= delay < STALL_AFTER_S + scaled(3.0)
