"""The fleet monitor against a real Prometheus on loopback scraping several simulators at
once: one freezes (`--freeze-at`), one spins (the base scheduler's livelock on a small pool),
two stay healthy. Through Prometheus's HTTP API alone, every stalled engine is named with its
kind and no healthy one is flagged; `kit monitor --prometheus` exits 3 on the first stall
with the engine's labels in the `--on-stall` command's environment. One Prometheus and one
set of simulators for the module; more kinds are more entries in `STALLED`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from stallkit.contract.fleet import FLEET_FILE, fleet_adapter
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.fleet.session import run_fleet
from stallkit.monitor.fleet.sinks import FleetOutcome
from stallkit.monitor.prometheus.client import PrometheusClient
from stallkit.monitor.prometheus.queries import FleetQuery
from tests.alerting.alerting_support import (
    prometheus,
    sim_engine_s,
    sim_process,
    tool,
    wait_engine_s,
)
from tests.machine import scaled

pytestmark = pytest.mark.wallclock

SCALE = 10.0
SCRAPE_S = 0.2
CONFIG = MonitorConfig(
    interval_s=0.4,
    stall_after_s=1.0,
    stop_after_s=None,
    gpu_window_s=0.0,
    # one instant query over loopback: milliseconds on the idle reference machine
    scrape_timeout_s=scaled(2.0),
)
#: wall seconds from the frozen simulator's start to its freeze: the spinning one starts
#: after it (1-2 s on the idle reference machine), then the load, which must be in flight by
#: then (a freeze with nothing in flight is no stall); 3 s, stretched by this machine's speed
#: and load
FREEZE_AFTER_S = scaled(3.0)
#: the livelock scenario's small pool: two decodes fill it while more requests wait; under
#: requests back to back, base soon reaches a step that schedules nothing, and stays there
SPIN_POOL = {
    "max_num_seqs": 2,
    "num_blocks": 8,
    "block_size": 16,
    "max_model_len": 128,
    "max_num_batched_tokens": 128,
    "prefill_compute_share": 0.4,
    "host_tier_blocks": 64,
}


@dataclass(frozen=True)
class Engine:
    """How to make one simulator stall (or not), and the load that drives it."""

    args: tuple[str, ...] = ()
    config: tuple[tuple[str, object], ...] = ()
    requests: int = 2
    max_tokens: int = 50_000
    prompt_words: int = 160
    repeat: bool = False  # short requests back to back: healthy


#: expected kind -> how to make it (a new fault knob is one more entry)
STALLED = {
    "frozen": Engine(args=("--freeze-at", f"{FREEZE_AFTER_S * SCALE:g}")),  # loaded by then
    "spinning": Engine(
        config=tuple(SPIN_POOL.items()), requests=4, max_tokens=90, prompt_words=30, repeat=True
    ),
}
HEALTHY = Engine(max_tokens=300, repeat=True)


@dataclass(frozen=True)
class Fleet:
    prom: str
    hosts: dict[str, str]  # name -> instance (host:port)


async def _drive(url: str, engine: Engine) -> None:
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:

        async def one(n: int) -> None:
            body = {
                "model": "stallkit-sim",
                # distinct prompts: no prefix shared, so the requests' KV adds up
                "prompt": " ".join(f"r{n}w{i}" for i in range(engine.prompt_words)),
                "max_tokens": engine.max_tokens,
                "stream": True,
            }
            while True:
                async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
                    async for _ in r.aiter_lines():
                        pass
                if not engine.repeat:
                    await asyncio.Event().wait()

        await asyncio.gather(*(one(n) for n in range(engine.requests)))


@contextlib.contextmanager
def _load(targets: dict[str, tuple[str, Engine]]) -> Iterator[None]:
    """Drive every simulator from a thread of its own for the module's life."""
    loop = asyncio.new_event_loop()
    tasks: list[asyncio.Task[None]] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        for url, engine in targets.values():
            tasks.append(loop.create_task(_drive(url, engine)))
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:

        def stop() -> None:
            for task in tasks:
                task.cancel()
            tasks.append(loop.create_task(_stopped(list(tasks), loop)))

        loop.call_soon_threadsafe(stop)
        thread.join(10)
        loop.close()


async def _stopped(tasks: list[asyncio.Task[None]], loop: asyncio.AbstractEventLoop) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)
    loop.stop()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tool("prometheus")
    tmp = tmp_path_factory.mktemp("fleet")
    # the stalled ones last: their load starts right after them (a freeze needs work in flight)
    engines = {"healthy-1": HEALTHY, "healthy-2": HEALTHY, **STALLED}
    with contextlib.ExitStack() as stack:
        sims = {
            name: stack.enter_context(sim_process(tmp, SCALE, name, *e.args, config=dict(e.config)))
            for name, e in engines.items()
        }
        hosts = {name: s.url.removeprefix("http://") for name, s in sims.items()}
        stack.enter_context(_load({n: (sims[n].url, e) for n, e in engines.items()}))
        at_s = sim_engine_s(sims["frozen"].url)
        assert at_s < FREEZE_AFTER_S * SCALE, f"set up too slow: load on at {at_s:g} engine s"
        prom = stack.enter_context(prometheus(tmp, list(hosts.values()), None, SCRAPE_S))
        # the watches count on the freeze behind them: a simulator starved of CPU falls behind
        # its clock, and its freeze comes late on the wall
        wait_engine_s(sims["frozen"].url, FREEZE_AFTER_S * SCALE)
        yield Fleet(prom, hosts)


async def watch_fleet(prom: str, out_dir: Path, pending: str | None = None) -> FleetOutcome:
    """`run_fleet` headless for 4 s (stretched by this machine's speed and load) over the
    engines Prometheus scrapes as job vllm."""
    client = PrometheusClient(prom)
    try:
        query = FleetQuery(selector='job="vllm"', pending=pending)
        # stall_after (1 s) and a few 0.4 s ticks after the first: 4 s on the idle reference
        # machine, where both stalls have begun before the watch starts (the fixture waits
        # for the freeze on the simulator's clock)
        duration_s = scaled(4.0)
        return await run_fleet(
            client, query, CONFIG, out_dir=out_dir, duration_s=duration_s, display="none"
        )
    finally:
        await client.aclose()


@pytest.mark.slow
async def test_every_stalled_engine_named_with_its_kind_and_no_healthy_one(
    fleet: Fleet, tmp_path: Path
) -> None:
    outcome = await watch_fleet(fleet.prom, tmp_path)
    by_host = {host: name for name, host in fleet.hosts.items()}
    assert outcome.engines == set(by_host)
    stalled = {by_host[e]: kinds for e, kinds in outcome.stalled_engines().items()}
    assert stalled == {kind: {kind} for kind in STALLED}, stalled
    lines = [
        fleet_adapter.validate_json(x) for x in (tmp_path / FLEET_FILE).read_text().splitlines()
    ]
    assert lines[0].type == "fleet_started"
    appeared = {x.engine: x.labels for x in lines if x.type == "appeared"}
    assert appeared[fleet.hosts["frozen"]]["job"] == "vllm"


@pytest.mark.slow
def test_kit_monitor_prometheus_exits_3_on_a_stall_with_the_engines_labels(
    fleet: Fleet, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "stallkit", "monitor", "--prometheus", fleet.prom]
    argv += ["--selector", '{job="vllm"}', "--interval", "0.4", "--stall-after", "1"]
    argv += ["--gpu-window", "0", "--duration", "20", "--no-dashboard", "--exit-on-stall"]
    argv += ["--out", str(out), "--on-stall", "env"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "stalled: " in done.stdout
    stalled_host = done.stdout.split("stalled: ", 1)[1].split(" ", 1)[0]
    assert stalled_host in {fleet.hosts[k] for k in STALLED}
    logs = list((out / "engines").rglob("on-stall/*-start.log"))
    assert logs, done.stdout
    env = dict(x.split("=", 1) for x in logs[0].read_text().splitlines() if "=" in x)
    labels = json.loads(env["STALLKIT_ENGINE_LABELS"])
    assert labels["job"] == "vllm" and labels["instance"] in set(fleet.hosts.values())
