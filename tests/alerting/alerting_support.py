"""Helpers of the alerting tests: timelines of the simulator (its core on a virtual clock),
streaming load, simulator processes, a real Prometheus on loopback, and the Prometheus tools
(or a skip saying how to get them)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from stallkit.engine import free_port
from stallkit.engine.launch.sim import SimLauncher
from stallkit.engine.serve.metrics import SimMetrics
from stallkit.engine.sim.config import Fault, FaultKind, SimConfig
from stallkit.engine.sim.core import SimEngine
from stallkit.engine.sim.faults import with_fault
from stallkit.engine.sim.trace import prepare
from stallkit.engine.spec import parse_spec
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.detector import StallDetector
from stallkit.monitor.detect.events import Down, GpuReading, MonitorEvent, Sample
from stallkit.monitor.live.timeline import event_record
from stallkit.monitor.signals.gpu import parse_dcgm
from stallkit.monitor.signals.parse import MetricsSnapshot, parse_metrics
from stallkit.monitor.signals.rates import snapshot_deltas
from tests.machine import scaled

INTERVAL_S = 0.1
STALL_AFTER_S = 1.0
CONFIG = MonitorConfig(
    interval_s=INTERVAL_S,
    stall_after_s=STALL_AFTER_S,
    stop_after_s=None,
    scrape_timeout_s=2,
    # PromQL judges each GPU reading as it is: so does the detector here, for a like-for-like
    # onset (its default forgives readings within the window after an onset)
    gpu_window_s=0.0,
)


@dataclass(frozen=True)
class Recorded:
    """A timeline's lines."""

    lines: list[dict[str, Any]]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [x for x in self.lines if x["type"] == kind]


async def _stream(client: httpx.AsyncClient, url: str, max_tokens: int) -> None:
    body = {
        "model": "stallkit-sim",
        "prompt": "tell me about stalls " * 40,
        "max_tokens": max_tokens,
        "stream": True,
    }
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        async for _line in response.aiter_lines():
            pass


@contextlib.asynccontextmanager
async def streaming_load(url: str, n: int, max_tokens: int) -> AsyncIterator[None]:
    """`n` concurrent streaming requests, cancelled when the block ends."""
    # a frozen engine sends nothing: a read timeout would drop its requests and make it look
    # idle, so it is 30 s (longer than any of these tests watches a stall, idle reference
    # machine), stretched by this machine's speed and load
    async with httpx.AsyncClient(timeout=httpx.Timeout(scaled(30.0))) as client:
        tasks = [asyncio.create_task(_stream(client, url, max_tokens)) for _ in range(n)]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def virtual_timeline(
    end_s: float,
    *,
    fault: FaultKind | None = None,
    fault_at_s: float = 1.5,
    fail_metrics_at_s: float | None = None,
    max_tokens: int = 50_000,
    livelock: bool = False,
) -> list[dict[str, Any]]:
    """A timeline of the simulator's core on a virtual clock: two requests kept in flight
    (or, with `livelock`, the base scheduler's livelock scenario, which spins), with a fault
    striking at `fault_at_s` if given, scraped every `INTERVAL_S` through its real /metrics
    and DCGM renderings into the real detector, the lines written as the monitor writes
    them. Deterministic: no wall clock."""
    core: SimEngine
    if livelock:
        core, t0 = prepare("base", "full-slots")
        config = core.config
    else:
        config = SimConfig(policy="base")
        core, t0 = SimEngine(config), 0.0
    engine = with_fault(core, None if fault is None else Fault(kind=fault, at_s=t0 + fault_at_s))
    metrics = SimMetrics(config, 1.0)
    detector = StallDetector(CONFIG, gpu_checked=True)
    prompt = ["tell", "me", "about", "stalls"] * 40
    ids = itertools.count()
    live: set[str] = set()
    lines: list[dict[str, Any]] = []
    prev: tuple[float, MetricsSnapshot] | None = None
    now = t0

    def top_up(at: float) -> None:
        while not livelock and len(live) < 2:
            rid = f"req-{next(ids)}"
            engine.add_request(rid, prompt, max_tokens, at)
            metrics.on_added(rid, at, max_tokens)
            live.add(rid)

    for k in range(round(end_s / INTERVAL_S) + 1):
        t = k * INTERVAL_S
        while now < t0 + t:
            top_up(now)
            result = engine.step(now)
            metrics.on_step(result, now, now + result.duration_s)
            now += result.duration_s
            for rid in result.finished:
                live.discard(rid)
                metrics.on_finished(rid, "stop", engine.request_info(rid), now)
        events: list[MonitorEvent] = []
        util = parse_dcgm(metrics.render_dcgm(t0 + t).decode())
        events.append(GpuReading(t, util))
        if fail_metrics_at_s is not None and t >= fail_metrics_at_s:
            events.append(Down(t, "HTTP 503"))
            snapshot, prev = None, None
        else:
            snapshot = parse_metrics(metrics.render(engine.stats, t0 + t).decode())
            deltas = None if prev is None else snapshot_deltas(prev[1], snapshot, t - prev[0])
            events.append(Sample(t, snapshot, deltas))
            prev = (t, snapshot)
        events.extend(detector.observe(t, snapshot, util))
        lines.extend(r for e in events if (r := event_record(e)) is not None)
    return lines


def tool(name: str) -> str:
    """The path of a Prometheus tool, or skip the test saying how to get it."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (Debian: apt-get install prometheus)")
    return path


@contextlib.contextmanager
def sim_process(
    tmp: Path, scale: float, name: str, *extra: str, config: Mapping[str, Any] | None = None
) -> Iterator[SimLauncher]:
    """A simulator (`sim:base`, `config` its SimConfig fields) in its own process."""
    launcher = SimLauncher(
        parse_spec("sim:base"), tmp / name, dict(config or {}), scale, extra_args=list(extra)
    )
    launcher.start()
    try:
        launcher.wait_healthy(scaled(30))  # a start takes 1-2 s on the idle reference machine
        yield launcher
    finally:
        launcher.stop()


def prometheus_config(targets: list[str], rules: Path | None, scrape_s: float) -> str:
    """Scrape `targets`' /metrics (job vllm) and their DCGM pages (job dcgm)."""
    listed = ", ".join(f'"{t}"' for t in targets)
    ms = int(scrape_s * 1000)
    text = (
        f"global:\n  scrape_interval: {ms}ms\n"
        f"  evaluation_interval: {ms}ms\n  scrape_timeout: {min(ms, 150)}ms\n"
    )
    if rules is not None:
        text += f'rule_files: ["{rules}"]\n'
    if not targets:
        return text
    return text + (
        "scrape_configs:\n"
        f"  - job_name: vllm\n    static_configs: [{{targets: [{listed}]}}]\n"
        "  - job_name: dcgm\n    metrics_path: /dcgm/metrics\n"
        f"    static_configs: [{{targets: [{listed}]}}]\n"
    )


def sim_engine_s(url: str) -> float:
    """The simulator's own engine clock (engine seconds since it started), from its page."""
    snapshot = parse_metrics(httpx.get(f"{url}/metrics", timeout=scaled(2)).text)
    assert snapshot.sim_clock is not None, url
    return snapshot.sim_clock.engine_s


def wait_engine_s(url: str, engine_s: float) -> float:
    """Wait until the simulator's own clock reads `engine_s` or more (a strike it plays is
    behind it); returns the clock. A simulator starved of CPU falls behind the wall, so it
    gets there late on the wall, however late: the deadline is the test's."""
    while (now_s := sim_engine_s(url)) < engine_s:
        time.sleep(0.1)
    return now_s


def _scraped(url: str) -> int:
    body = httpx.get(f"{url}/api/v1/query", params={"query": "up"}, timeout=scaled(2)).json()
    return len(body["data"]["result"])


@contextlib.contextmanager
def prometheus(
    tmp: Path,
    targets: list[str],
    rules: Path | None = None,
    scrape_s: float = 0.2,
    *,
    data: Path | None = None,
    extra_args: tuple[str, ...] = (),
    extra_jobs: str = "",
) -> Iterator[str]:
    """A real Prometheus on loopback scraping `targets` (none: serving `data` alone);
    `extra_jobs`: more entries of its scrape_configs, as YAML."""
    config = prometheus_config(targets, rules, scrape_s) + extra_jobs
    (tmp / "prometheus.yml").write_text(config)
    port = free_port()
    argv = [tool("prometheus"), f"--config.file={tmp / 'prometheus.yml'}"]
    argv += [
        f"--storage.tsdb.path={data or tmp / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    argv += list(extra_args)
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        # ready in about 1 s and its first scrape of every target within 5 s more (idle
        # reference machine): 30 s, stretched by this machine's speed and load
        deadline = time.monotonic() + scaled(30)
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/-/ready", timeout=scaled(1)).status_code == 200:
                    break
            assert proc.poll() is None, (tmp / "prometheus.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "prometheus did not get ready"
            time.sleep(0.1)
        # its scrape manager takes up new targets every 5 s: wait for every target's first
        while targets and _scraped(url) < 2 * len(targets):
            assert time.monotonic() < deadline, "prometheus scraped nothing"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
