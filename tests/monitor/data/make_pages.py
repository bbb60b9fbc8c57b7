"""Regenerate the recorded vLLM `/metrics` pages in this folder (run by hand, not by pytest).

The pages are written by prometheus_client itself, with the families, label names, help
texts and bucket boundaries a vLLM 0.32 server registers, so the exposition format is the
real one (HELP/TYPE lines, `_total` counters, `_created` series, histogram buckets).
Usage: `python tests/monitor/data/make_pages.py` from the repository root.
"""

from __future__ import annotations

import random
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

HERE = Path(__file__).parent
MODEL = "Qwen/Qwen3-30B-A3B-Instruct-2507"
LABELS = ["model_name", "engine"]

LATENCY: tuple[float, ...] = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
)
LATENCY += (120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TTFT: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
)
TTFT += (7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL: tuple[float, ...] = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
)
ITL += (10.0, 20.0, 40.0, 80.0)
ITER = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
TOKENS = tuple(m * 10**e for e in range(6) for m in (1, 2, 5) if m * 10**e <= 131072)

HISTOGRAMS: dict[str, tuple[str, tuple[float, ...]]] = {
    "vllm:e2e_request_latency_seconds": ("Histogram of e2e request latency in seconds.", LATENCY),
    "vllm:inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.", ITL),
    "vllm:iteration_tokens_total": ("Histogram of number of tokens per engine_step.", ITER),
    "vllm:request_decode_time_seconds": (
        "Histogram of time spent in DECODE phase for request.",
        LATENCY,
    ),
    "vllm:request_generation_tokens": ("Number of generation tokens processed.", TOKENS),
    "vllm:request_inference_time_seconds": (
        "Histogram of time spent in RUNNING phase for request.",
        LATENCY,
    ),
    "vllm:request_max_num_generation_tokens": (
        "Histogram of maximum number of requested generation tokens.",
        TOKENS,
    ),
    "vllm:request_num_preemptions": (
        "Number of preemptions per finished request.",
        (1, 2, 3, 4, 5, 10, 20),
    ),
    "vllm:request_params_max_tokens": ("Histogram of the max_tokens request parameter.", TOKENS),
    "vllm:request_params_n": ("Histogram of the n request parameter.", (1, 2, 5, 10, 20)),
    "vllm:request_prefill_kv_computed_tokens": (
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        TOKENS,
    ),
    "vllm:request_prefill_time_seconds": (
        "Histogram of time spent in PREFILL phase for request.",
        LATENCY,
    ),
    "vllm:request_prompt_tokens": ("Number of prefill tokens processed.", TOKENS),
    "vllm:request_queue_time_seconds": (
        "Histogram of time spent in WAITING phase for request.",
        LATENCY,
    ),
    "vllm:request_time_per_output_token_seconds": (
        "Histogram of time_per_output_token_seconds per request.",
        ITL,
    ),
    "vllm:time_to_first_token_seconds": ("Histogram of time to first token in seconds.", TTFT),
}

COUNTERS = {
    "vllm:estimated_flops_per_gpu": "Estimated number of floating point operations per GPU.",
    "vllm:estimated_read_bytes_per_gpu": "Estimated number of bytes read from memory per GPU.",
    "vllm:estimated_write_bytes_per_gpu": "Estimated number of bytes written to memory per GPU.",
    "vllm:external_prefix_cache_hits": "External prefix cache hits from KV connector.",
    "vllm:external_prefix_cache_queries": "External prefix cache queries from KV connector.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:mm_cache_hits": "Multi-modal cache hits, in terms of number of cached items.",
    "vllm:mm_cache_queries": "Multi-modal cache queries, in terms of number of queried items.",
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:prompt_tokens_cached": "Number of cached prompt tokens (local + external).",
}


def _state(scale: float, rng: random.Random) -> dict[str, float]:
    """Counter and gauge values of one engine partway through a multi-agent run."""
    gen = round(812_345 * scale)
    prompt = round(23_456_789 * scale)
    return {
        "vllm:generation_tokens": gen,
        "vllm:prompt_tokens": prompt,
        "vllm:prompt_tokens_cached": round(prompt * 0.71),
        "vllm:prefix_cache_queries": round(prompt * 1.04),
        "vllm:prefix_cache_hits": round(prompt * 0.71),
        "vllm:num_preemptions": round(37 * scale),
        "vllm:estimated_flops_per_gpu": round(prompt * 6.1e9),
        "vllm:estimated_read_bytes_per_gpu": round(prompt * 1.9e6),
        "vllm:estimated_write_bytes_per_gpu": round(prompt * 2.2e5),
        "iterations": round(95_000 * scale + rng.randint(0, 999)),
    }


def build_page(
    engines: dict[str, float],
    gauges: dict[str, dict[str, float]],
    *,
    fork: bool = False,
    seed: int = 7,
) -> str:
    """One /metrics page; `engines` maps engine index to a counter scale."""
    rng = random.Random(seed)
    registry = CollectorRegistry()
    # The API server's default collectors open every real page.
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    ProcessCollector(registry=registry)
    made = {name: Counter(name, doc, LABELS, registry=registry) for name, doc in COUNTERS.items()}
    hist = {
        name: Histogram(name, doc, LABELS, buckets=b, registry=registry)
        for name, (doc, b) in HISTOGRAMS.items()
    }
    running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                    LABELS, registry=registry)  # fmt: skip
    waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                    LABELS, registry=registry)  # fmt: skip
    by_reason = Gauge("vllm:num_requests_waiting_by_reason", "Number of waiting requests by "
                      "reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
                      "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, "
                      "blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
                      [*LABELS, "reason"], registry=registry)  # fmt: skip
    kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
               LABELS, registry=registry)  # fmt: skip
    sleep = Gauge("vllm:engine_sleep_state", "Engine sleep state; awake = 0 means engine is "
                  "sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep "
                  "level 1; discard_all = 1 means sleep level 2.", [*LABELS, "sleep_state"],
                  registry=registry)  # fmt: skip
    success = Counter("vllm:request_success", "Count of successfully processed requests.",
                      [*LABELS, "finished_reason"], registry=registry)  # fmt: skip
    by_source = Counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                        [*LABELS, "source"], registry=registry)  # fmt: skip
    cached_by_source = Counter("vllm:prompt_tokens_cached_by_source", "Prefix-cache hit tokens "
                               "by the cache tier that supplied them.", [*LABELS, "source"],
                               registry=registry)  # fmt: skip
    rejections = Counter("vllm:admission_rejections", "Number of admission attempts rejected "
                         "by a queue limit, by reason.", ["model_name", "reason"],
                         registry=registry)  # fmt: skip
    info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                 ["block_size", "cache_dtype", "enable_prefix_caching", "engine",
                  "gpu_memory_utilization", "num_gpu_blocks"], registry=registry)  # fmt: skip
    for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
        rejections.labels(MODEL, reason)
    if fork:
        share = Gauge("vllm:scheduler_prefill_compute_share", "Configured prefill compute "
                      "share of the scheduler (0 = off).", LABELS, registry=registry)  # fmt: skip
        compute = Counter("vllm:scheduler_compute_seconds", "Compute seconds charged per "
                          "scheduler class.", [*LABELS, "class"], registry=registry)  # fmt: skip
    for eng, scale in engines.items():
        lv = (MODEL, eng)
        values = _state(scale, rng)
        for name, counter in made.items():
            counter.labels(*lv).inc(values.get(name, 0))
        g = gauges[eng]
        running.labels(*lv).set(g["running"])
        waiting.labels(*lv).set(g["capacity"] + g["deferred"])
        by_reason.labels(*lv, "capacity").set(g["capacity"])
        by_reason.labels(*lv, "deferred").set(g["deferred"])
        kv.labels(*lv).set(g["kv"])
        for state, v in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
            sleep.labels(*lv, state).set(v)
        finished = {"stop": 1800 * scale, "length": 412 * scale, "abort": 9 * scale, "error": 0}
        for reason, n in finished.items():
            success.labels(*lv, reason).inc(round(n))
        for source, frac in (("local_compute", 0.29), ("local_cache_hit", 0.71)):
            by_source.labels(*lv, source).inc(round(values["vllm:prompt_tokens"] * frac))
        by_source.labels(*lv, "external_kv_transfer")
        for source in ("device", "host", "p2p", "disk", "external_unspecified"):
            frac = {"device": 0.66, "host": 0.05}.get(source, 0.0)
            cached_by_source.labels(*lv, source).inc(round(values["vllm:prompt_tokens"] * frac))
        info.labels("16", "auto", "True", eng, "0.9", "12345").set(1)
        for name, h in hist.items():
            # The iteration histogram counts engine steps, far more than requests.
            n = values["iterations"] if name == "vllm:iteration_tokens_total" else 200
            _observe(h.labels(*lv), name, round(n), rng)
        if fork:
            share.labels(*lv).set(0.5)
            compute.labels(*lv, "prefill").inc(round(3100.25 * scale, 2))
            compute.labels(*lv, "decode").inc(round(2950.5 * scale, 2))
    return generate_latest(registry).decode()


def _observe(child: Histogram, name: str, n: int, rng: random.Random) -> None:
    """Fill a histogram child with `n` plausible observations."""
    for _ in range(n):
        if "seconds" in name:
            child.observe(rng.lognormvariate(0.0, 1.5))
        else:
            child.observe(float(rng.randint(1, 30_000)))


def main() -> None:
    """Write every recorded page of this folder."""
    busy = {"running": 12, "capacity": 2, "deferred": 0, "kv": 0.62}
    stalled = {"running": 4, "capacity": 3, "deferred": 3, "kv": 0.98}
    pages = {
        "vllm-0.32-one-engine.txt": build_page({"0": 1.0}, {"0": busy}),
        "vllm-0.32-two-engines.txt": build_page(
            {"0": 1.0, "1": 0.5}, {"0": busy, "1": stalled}, fork=True, seed=8
        ),
        "counter-reset-before.txt": build_page({"0": 1.0}, {"0": busy}, seed=9),
        "counter-reset-after.txt": build_page({"0": 0.001}, {"0": busy}, seed=10),
    }
    for name, text in pages.items():
        (HERE / name).write_text(text)


if __name__ == "__main__":
    main()
