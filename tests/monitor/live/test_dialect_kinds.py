"""Each dialect's stall kinds over HTTP: scripted pages in each engine's own names, played
by real servers on port 0 and watched by the real monitor loop (dialect told apart from the
page). Tokens flow for the first 0.6 s, then each scenario's signature holds; a kind an
engine's page cannot show (no preemption or step counter) is never named, the stall reads
`frozen`, and a long generation whose token counter waits for the request's end is no stall
while the engine's live forward counter moves.

The loop and the script share one virtual clock per case (time moves only when the loop
sleeps), so what is named does not depend on how fast the machine answers the scrapes; the
cases run a few at a time in one task group, which closes every server if one fails."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import MonitorEvent, StallStarted
from stallkit.monitor.live.watch import watch
from stallkit.monitor.signals.dialects import dialect_named
from stallkit.monitor.signals.gpu import gpu_source
from tests.machine import scaled
from tests.monitor.live.test_watch_sim import VirtualClock, page_server

CONFIG = MonitorConfig(
    interval_s=0.05,
    stall_after_s=0.5,
    stop_after_s=None,
    gpu_window_s=0.1,
    # wall seconds for one scrape over loopback (a few ms idle); only a hang should meet it:
    # 1 s on the idle reference machine, stretched by its speed and load
    scrape_timeout_s=scaled(1.0),
)
FLOW_S = 0.6  # tokens flow until then (virtual seconds)
#: cases watched at once: each is a server and a watcher in one event loop; more only
#: crowd the loop (21 at once missed a 1 s first scrape on a slow two-core machine)
AT_ONCE = 4


@dataclass(frozen=True)
class State:
    """What one scrape shows: gauges, counters (each engine's own), GPU %, or no series."""

    running: int = 2
    waiting: int = 1
    gen: float = 0.0  # the engine's token counter (counted at a request's end where it is so)
    live: float = 0.0  # its live forward counter (decode calls, forward passes, decode tokens)
    prompt: float = 0.0
    preempted: float = 0.0
    steps: float = 0.0  # vLLM's prefix-cache queries
    gpu: float = 0.0
    series: bool = True


def vllm_page(s: State) -> str:
    lab = '{model_name="m",engine="0"}'
    return (
        f"vllm:num_requests_running{lab} {s.running}\nvllm:num_requests_waiting{lab} {s.waiting}\n"
        f"vllm:generation_tokens_total{lab} {s.gen + s.live}\n"
        f"vllm:prompt_tokens_total{lab} {s.prompt}\nvllm:num_preemptions_total{lab} {s.preempted}\n"
        f"vllm:prefix_cache_queries_total{lab} {s.steps}\n"
    )


def sglang_page(s: State) -> str:
    lab = '{model_name="m"}'
    return (
        f"sglang:num_running_reqs{lab} {s.running}\nsglang:num_queue_reqs{lab} {s.waiting}\n"
        f"sglang:token_usage{lab} 0.3\nsglang:generation_tokens_total{lab} {s.gen}\n"
        f"sglang:prompt_tokens_total{lab} {s.prompt}\n"
        f"sglang:num_retracted_requests_total{lab} {s.preempted}\n"
        f'sglang:realtime_tokens_total{{mode="decode",model_name="m"}} {s.live}\n'
    )


def llamacpp_page(s: State) -> str:
    return (
        f"llamacpp:prompt_tokens_total {s.prompt}\nllamacpp:tokens_predicted_total {s.gen}\n"
        f"llamacpp:n_decode_total {s.live}\nllamacpp:requests_processing {s.running}\n"
        f"llamacpp:requests_deferred {s.waiting}\n"
    )


def tgi_page(s: State) -> str:
    return (
        f"tgi_queue_size {s.waiting}\ntgi_batch_current_size {s.running}\n"
        f'tgi_batch_inference_success{{method="decode"}} {s.live}\n'
        f"tgi_request_generated_tokens_sum {s.gen}\ntgi_request_generated_tokens_count 3\n"
    )


PAGES: dict[str, Callable[[State], str]] = {
    "vllm": vllm_page,
    "sglang": sglang_page,
    "llamacpp": llamacpp_page,
    "tgi": tgi_page,
}
FLOWING = State()


def flowing(k: int) -> State:
    """Tokens flow: the live counter moves, and requests finish now and then."""
    return State(gen=100.0 * (k // 10), live=10.0 * k, prompt=50.0 * k)


#: scenario -> what the k-th scrape after the flow shows (the counters as they were)
QUIET = flowing(int(FLOW_S / 0.05))
SCENARIOS: dict[str, Callable[[int], State]] = {
    "frozen": lambda k: QUIET,
    "busy_hang": lambda k: State(**{**QUIET.__dict__, "gpu": 100.0}),
    "dead_core": lambda k: State(series=False),
    "thrashing": lambda k: State(
        **{**QUIET.__dict__, "preempted": k, "prompt": QUIET.prompt + 90 * k}
    ),
    "blocked gauges": lambda k: State(
        **{**QUIET.__dict__, "running": 0, "waiting": 1, "steps": 7.0 * k}
    ),
    "long generation": lambda k: State(**{**QUIET.__dict__, "live": QUIET.live + 10.0 * k}),
}


def script(dialect: str, scenario: str, clock: VirtualClock) -> Callable[[], tuple[int, str]]:
    calls = [0]
    t0: list[float] = []

    def respond() -> tuple[int, str]:
        calls[0] += 1
        k = calls[0] // 2  # each tick reads the page and its DCGM lines
        t0.append(clock())  # the first scrape starts the script
        after = t0[-1] - t0[0] - FLOW_S
        state = flowing(k) if after < 0 else SCENARIOS[scenario](k)
        body = PAGES[dialect](state) if state.series else "# HELP up x\n"
        body += f'DCGM_FI_DEV_GPU_UTIL{{gpu="0"}} {state.gpu}\n'
        return 200, body

    return respond


async def _watch(dialect: str, scenario: str, slots: asyncio.Semaphore) -> list[MonitorEvent]:
    events: list[MonitorEvent] = []
    clock = VirtualClock()
    async with slots, page_server(script(dialect, scenario, clock)) as url:
        gpu = gpu_source(f"dcgm:{url}/dcgm/metrics")
        async for event in watch(url, CONFIG, gpu, duration_s=4.0, clock=clock, sleep=clock.sleep):
            events.append(event)
            if isinstance(event, StallStarted):
                break
    return events


#: (dialect, scenario) -> the kind named (None: no stall)
EXPECTED: dict[tuple[str, str], str | None] = {
    **{(d, "frozen"): "frozen" for d in PAGES},
    **{(d, "busy_hang"): "busy_hang" for d in PAGES},
    **{(d, "dead_core"): "dead_core" for d in PAGES},
    ("vllm", "thrashing"): "thrashing",
    ("sglang", "thrashing"): "thrashing",
    ("vllm", "blocked gauges"): "blocked",
    # no step counter on these pages: a queue that waits reads frozen, never blocked
    ("sglang", "blocked gauges"): "frozen",
    ("llamacpp", "blocked gauges"): "frozen",
    ("tgi", "blocked gauges"): "frozen",
    # the token counter waits for the request's end; the live counter moves: no stall
    ("sglang", "long generation"): None,
    ("llamacpp", "long generation"): None,
    ("tgi", "long generation"): None,
}


async def test_each_dialects_stall_kinds_on_scripted_pages_over_http() -> None:
    slots = asyncio.Semaphore(AT_ONCE)
    async with asyncio.TaskGroup() as group:  # one failure cancels and closes the rest
        runs = {case: group.create_task(_watch(*case, slots)) for case in EXPECTED}
    named = {
        case: next((e.kind for e in run.result() if isinstance(e, StallStarted)), None)
        for case, run in runs.items()
    }
    assert named == EXPECTED
    for (dialect, _scenario), kind in named.items():  # never a kind the page cannot show
        assert kind not in dialect_named(dialect).unavailable()


@pytest.mark.parametrize("dialect", ["sglang", "llamacpp", "tgi"])
def test_scripted_pages_are_in_the_dialect_they_claim(dialect: str) -> None:
    from stallkit.monitor.signals.dialects import detect_dialect

    found = detect_dialect(PAGES[dialect](FLOWING))
    assert found is not None and found.name == dialect
