"""The metric family names every role shares, written once.

The simulator serves them, the patched scheduler makes the fork's, the monitor parses them,
the alert rules name them in PromQL, and the stall exporter publishes the `stallkit_*` ones;
each of those imports the constant from here rather than spelling the name again. Names are
the family names a server declares (counters with their `_total`, as in vLLM 0.32's golden
list); `bare()` gives the name without `_total`, which older pages and prometheus_client's
parser use for a counter's family.

This module imports the standard library only: the patched scheduler imports it inside
vLLM's engine-core process.
"""

from __future__ import annotations

from typing import Literal, get_args

#: The prefix of every vLLM family.
VLLM_PREFIX = "vllm:"

# -- vLLM families the monitor reads (the stall signals) -------------------------------------
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
NUM_REQUESTS_WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
#: Older vLLM releases' name for KV_CACHE_USAGE (accepted as well).
GPU_CACHE_USAGE_OLD = "vllm:gpu_cache_usage_perc"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
NUM_PREEMPTIONS = "vllm:num_preemptions_total"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
REQUEST_SUCCESS = "vllm:request_success_total"
#: A histogram: its `_count` sample counts engine steps.
ITERATION_TOKENS = "vllm:iteration_tokens_total"

# -- further vLLM families the simulator serves --------------------------------------------
CACHE_CONFIG_INFO = "vllm:cache_config_info"
ENGINE_SLEEP_STATE = "vllm:engine_sleep_state"
EXTERNAL_PREFIX_CACHE_QUERIES = "vllm:external_prefix_cache_queries_total"
EXTERNAL_PREFIX_CACHE_HITS = "vllm:external_prefix_cache_hits_total"
PROMPT_TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
PROMPT_TOKENS_CACHED = "vllm:prompt_tokens_cached_total"
TIME_TO_FIRST_TOKEN = "vllm:time_to_first_token_seconds"
E2E_REQUEST_LATENCY = "vllm:e2e_request_latency_seconds"
REQUEST_QUEUE_TIME = "vllm:request_queue_time_seconds"
REQUEST_INFERENCE_TIME = "vllm:request_inference_time_seconds"
REQUEST_PREFILL_TIME = "vllm:request_prefill_time_seconds"
REQUEST_DECODE_TIME = "vllm:request_decode_time_seconds"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
REQUEST_TIME_PER_OUTPUT_TOKEN = "vllm:request_time_per_output_token_seconds"
REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"
REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"
REQUEST_MAX_NUM_GENERATION_TOKENS = "vllm:request_max_num_generation_tokens"
REQUEST_PARAMS_MAX_TOKENS = "vllm:request_params_max_tokens"
REQUEST_PARAMS_N = "vllm:request_params_n"
REQUEST_PREFILL_KV_COMPUTED_TOKENS = "vllm:request_prefill_kv_computed_tokens"
REQUEST_NUM_PREEMPTIONS = "vllm:request_num_preemptions"

# -- the scheduler fork's families (not in upstream vLLM) ----------------------------------
#: Gauge: the configured prefill share of contended compute (0 = off).
SCHEDULER_PREFILL_COMPUTE_SHARE = "vllm:scheduler_prefill_compute_share"
#: Counter with label `class` (prefill / decode): engine seconds charged to each class.
SCHEDULER_COMPUTE_SECONDS = "vllm:scheduler_compute_seconds_total"
#: Counter with labels `turn`, `empty`: every step (the patched scheduler plugin only).
SCHEDULER_STEPS = "vllm:scheduler_steps_total"

# -- other engines' families (the metric dialects besides vLLM's) ----------------------------
#: A metric dialect: an engine family's names for the monitor's signals.
DialectName = Literal["vllm", "sglang", "llamacpp", "tgi"]
#: The dialects the monitor reads, in the order a page is matched against them.
DIALECT_NAMES: tuple[DialectName, ...] = get_args(DialectName)
SGLANG_PREFIX = "sglang:"
SGLANG_NUM_RUNNING_REQS = "sglang:num_running_reqs"
SGLANG_NUM_QUEUE_REQS = "sglang:num_queue_reqs"
SGLANG_TOKEN_USAGE = "sglang:token_usage"
#: Counted when a request finishes (the tokenizer manager's counters).
SGLANG_PROMPT_TOKENS = "sglang:prompt_tokens_total"
SGLANG_GENERATION_TOKENS = "sglang:generation_tokens_total"
SGLANG_CACHED_TOKENS = "sglang:cached_tokens_total"
#: Counter with label `mode` (prefill_compute, prefill_cache, decode): tokens the scheduler
#: processed, counted as it runs (newer releases).
SGLANG_REALTIME_TOKENS = "sglang:realtime_tokens_total"
#: Counter: requests retracted (thrown back to the queue, SGLang's preemption).
SGLANG_RETRACTED_REQUESTS = "sglang:num_retracted_requests_total"
LLAMACPP_PREFIX = "llamacpp:"
LLAMACPP_REQUESTS_PROCESSING = "llamacpp:requests_processing"
LLAMACPP_REQUESTS_DEFERRED = "llamacpp:requests_deferred"
#: Counted when a slot finishes its request.
LLAMACPP_TOKENS_PREDICTED = "llamacpp:tokens_predicted_total"
#: Counted when a slot's prompt is processed.
LLAMACPP_PROMPT_TOKENS = "llamacpp:prompt_tokens_total"
#: Counter: llama_decode() calls (each processes the busy slots' next tokens).
LLAMACPP_N_DECODE = "llamacpp:n_decode_total"
#: Gauge, older releases only: KV cache usage (1 = full).
LLAMACPP_KV_CACHE_USAGE = "llamacpp:kv_cache_usage_ratio"
TGI_PREFIX = "tgi_"
TGI_QUEUE_SIZE = "tgi_queue_size"
TGI_BATCH_CURRENT_SIZE = "tgi_batch_current_size"
#: Counter with label `method` (prefill, decode): forward passes that succeeded. TGI's
#: exporter writes counters without `_total`.
TGI_BATCH_INFERENCE_SUCCESS = "tgi_batch_inference_success"
#: Histogram of tokens per request, observed when a request finishes.
TGI_REQUEST_GENERATED_TOKENS = "tgi_request_generated_tokens"

# -- others' families ------------------------------------------------------------------------
#: The DCGM exporter's GPU utilisation (0..100) per `gpu` label.
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
#: The DCGM exporter's power draw (watts) per `gpu` label.
DCGM_POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
#: The DCGM exporter's SM activity (a fraction 0..1 of cycles with a warp resident) per `gpu`.
DCGM_SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
#: The simulator's engine clock (engine seconds since start; simulator only, not vLLM's).
SIM_ENGINE_TIME = "stallkit_sim_engine_time_seconds"
#: The simulator's nominal time scale (engine seconds per wall second), read by `url:` arms.
SIM_TIME_SCALE = "stallkit_sim_time_scale"
#: Counter with label `outcome` (loaded / recomputed): restores from the host tier, loaded or
#: recomputed after their max wait (simulator and twin only; vLLM counts neither).
SIM_RESTORES = "stallkit_sim_restores_total"
#: Gauge: KV blocks the host tier holds (the simulator's, or a twin's KV connector's).
SIM_HOST_TIER_BLOCKS = "stallkit_sim_host_tier_blocks"

# -- the stall exporter's families (labels `engine`, `arm`) ----------------------------------
STALL_ACTIVE = "stallkit_stall_active"
STALL_DURATION = "stallkit_stall_duration_seconds"
STALLS = "stallkit_stalls_total"
GENERATION_TOKENS_PER_SECOND = "stallkit_generation_tokens_per_second"
REQUESTS_RUNNING = "stallkit_requests_running"
REQUESTS_WAITING = "stallkit_requests_waiting"
KV_CACHE_USAGE_RATIO = "stallkit_kv_cache_usage_ratio"
GPU_UTILIZATION = "stallkit_gpu_utilization_percent"
SCRAPE_FAILURES = "stallkit_scrape_failures_total"
ENGINE_UP = "stallkit_engine_up"
LAST_SAMPLE_TIMESTAMP = "stallkit_last_sample_timestamp_seconds"

# -- sets ----------------------------------------------------------------------------------
#: Families only the scheduler fork exports; the step counter comes from the patched plugin.
FORK_FAMILIES = frozenset(
    {SCHEDULER_PREFILL_COMPUTE_SHARE, SCHEDULER_COMPUTE_SECONDS, SCHEDULER_STEPS}
)
#: The families (as a server declares them) the monitor reads.
MONITOR_FAMILIES = frozenset(
    {
        NUM_REQUESTS_RUNNING,
        NUM_REQUESTS_WAITING,
        NUM_REQUESTS_WAITING_BY_REASON,
        KV_CACHE_USAGE,
        GENERATION_TOKENS,
        PROMPT_TOKENS,
        NUM_PREEMPTIONS,
        PREFIX_CACHE_QUERIES,
        PREFIX_CACHE_HITS,
        REQUEST_SUCCESS,
        ITERATION_TOKENS,
        *FORK_FAMILIES,
    }
)
#: The golden vLLM 0.32 families the simulator serves (it also serves the fork's share and
#: compute seconds, and its engine-time gauge).
SIM_VLLM_FAMILIES = frozenset(
    (MONITOR_FAMILIES - FORK_FAMILIES)
    | {
        CACHE_CONFIG_INFO,
        ENGINE_SLEEP_STATE,
        EXTERNAL_PREFIX_CACHE_QUERIES,
        EXTERNAL_PREFIX_CACHE_HITS,
        PROMPT_TOKENS_BY_SOURCE,
        PROMPT_TOKENS_CACHED,
        TIME_TO_FIRST_TOKEN,
        E2E_REQUEST_LATENCY,
        REQUEST_QUEUE_TIME,
        REQUEST_INFERENCE_TIME,
        REQUEST_PREFILL_TIME,
        REQUEST_DECODE_TIME,
        INTER_TOKEN_LATENCY,
        REQUEST_TIME_PER_OUTPUT_TOKEN,
        REQUEST_PROMPT_TOKENS,
        REQUEST_GENERATION_TOKENS,
        REQUEST_MAX_NUM_GENERATION_TOKENS,
        REQUEST_PARAMS_MAX_TOKENS,
        REQUEST_PARAMS_N,
        REQUEST_PREFILL_KV_COMPUTED_TOKENS,
        REQUEST_NUM_PREEMPTIONS,
    }
)
#: The fork's families the simulator serves (it has no step counter).
SIM_FORK_FAMILIES = frozenset({SCHEDULER_PREFILL_COMPUTE_SHARE, SCHEDULER_COMPUTE_SECONDS})
#: The stall exporter's families.
STALLKIT_FAMILIES = frozenset(
    {
        STALL_ACTIVE,
        STALL_DURATION,
        STALLS,
        GENERATION_TOKENS_PER_SECOND,
        REQUESTS_RUNNING,
        REQUESTS_WAITING,
        KV_CACHE_USAGE_RATIO,
        GPU_UTILIZATION,
        SCRAPE_FAILURES,
        ENGINE_UP,
        LAST_SAMPLE_TIMESTAMP,
    }
)


def bare(name: str) -> str:
    """`name` without a counter's `_total` (a family name as older pages and parsers give it)."""
    return name.removesuffix("_total")


def sample(name: str, suffix: str) -> str:
    """A histogram's sample name, e.g. `sample(ITERATION_TOKENS, "count")`."""
    return f"{name}_{suffix}"
