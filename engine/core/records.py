"""The simulated engine's records: what its core hands out (steps, requests, counters).

Plain frozen data, shared by the scheduler that fills them and `SimEngine`, the core's public
face, which re-exports them; kept apart so that the scheduler and the core do not import each
other.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Container
from dataclasses import dataclass, field

from stallkit.engine.errors import EngineError

__all__ = [
    "ITERATION_TOKEN_BOUNDS",
    "VOCABULARY",
    "AdvanceResult",
    "EngineStats",
    "HistogramSnapshot",
    "RequestInfo",
    "SimRequestError",
    "StepResult",
    "check_request",
    "check_request_id",
    "output_words",
]

_WORDS = (
    "the a of to and in is it that for on as with was by at from this be or are an not "
    "which have but has they their one all were when more can will there would about so "
    "out if up what some into time only other then than also its two may new first like"
)
#: The small fixed vocabulary output words are drawn from.
VOCABULARY: tuple[str, ...] = tuple(_WORDS.split(" "))

#: Bucket bounds of the iteration-tokens histogram (as vLLM's `iteration_tokens_total`).
ITERATION_TOKEN_BOUNDS: tuple[float, ...] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
)  # fmt: skip


def output_words(request_id: str, start: int, count: int) -> list[str]:
    """Output words `start .. start+count-1` of a request: deterministic per request id.

    Word k is `VOCABULARY[(crc32(id) + 7 k) % len(VOCABULARY)]`."""
    return list(words_from(zlib.crc32(request_id.encode()), start, count))


#: the words of one cycle of the stride-7 walk from each vocabulary offset (filled lazily)
_CYCLES: dict[int, tuple[str, ...]] = {}
_PERIOD = len(VOCABULARY) // math.gcd(7, len(VOCABULARY))


def _cycle(offset: int) -> tuple[str, ...]:
    """One period of the walk from `offset`: word k is `VOCABULARY[(offset + 7 k) % n]`."""
    n = len(VOCABULARY)
    cycle = _CYCLES.get(offset % n)
    if cycle is None:
        cycle = _CYCLES[offset % n] = tuple(
            VOCABULARY[(offset + 7 * k) % n] for k in range(_PERIOD)
        )
    return cycle


def word_at(offset: int, k: int) -> str:
    """Word `k` of the walk from `offset` (a request's crc32)."""
    return _cycle(offset)[k % _PERIOD]


def words_from(offset: int, start: int, count: int) -> tuple[str, ...]:
    """Words `start .. start+count-1` of the walk from `offset` (a request's crc32): the walk
    repeats every `_PERIOD` words, so a long run is a rotated cycle, repeated."""
    cycle = _cycle(offset)
    r = start % _PERIOD
    rotated = cycle[r:] + cycle[:r]
    return (rotated * (count // _PERIOD + 1))[:count]


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one scheduler step did."""

    #: engine seconds the step took (an idle tick when it scheduled nothing)
    duration_s: float
    #: the class the controller chose: "prefill" | "decode", or "none" (share off / idle)
    turn: str
    scheduled_tokens: int
    prefill_tokens: int
    decode_tokens: int
    preemptions: int
    #: restore admissions polled in the waiting pass this step
    restores_polled: int
    #: GPU KV blocks in use by requests, 0..1
    kv_usage: float
    gpu_busy: bool
    vruntime_prefill: float
    vruntime_decode: float
    #: new output words per request id this step
    outputs: dict[str, list[str]]
    #: request id -> finish reason ("length" | "abort")
    finished: dict[str, str]


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """One request as the engine sees it (kept for a while after it finishes)."""

    prompt_tokens: int
    #: prompt tokens served from the GPU prefix cache or the host tier at first scheduling
    cached_prompt_tokens: int
    output_tokens: int
    arrival_s: float
    first_scheduled_s: float | None
    first_token_s: float | None
    finished_s: float | None
    #: "waiting" | "running" | "finished"
    state: str
    #: "length" | "abort" once finished
    finish_reason: str | None
    num_preemptions: int


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A cumulative histogram: `bucket_counts[i]` observations were <= `bounds[i]`."""

    bounds: tuple[float, ...]
    #: cumulative counts, one per bound, then the +Inf bucket (== count)
    bucket_counts: tuple[int, ...]
    count: int
    sum: float

    def buckets(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, `+Inf` last: prometheus_client's histogram form."""
        labels = [repr(float(b)) for b in self.bounds] + ["+Inf"]
        return list(zip(labels, self.bucket_counts, strict=True))


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Counters (monotonic) and gauges of the engine, for /metrics and the driver."""

    now_s: float
    num_running: int
    num_waiting: int
    #: waiting requests by reason: "capacity" and "deferred" (restores waiting for capacity)
    waiting_by_reason: dict[str, int]
    kv_usage: float
    num_preemptions: int
    #: prefix cache lookups and hits, in tokens (as vLLM counts them)
    prefix_cache_queries: int
    prefix_cache_hits: int
    external_prefix_cache_queries: int
    external_prefix_cache_hits: int
    generation_tokens: int
    prompt_tokens: int
    #: prompt tokens by source: local_compute, local_cache_hit, external_kv_transfer
    prompt_tokens_by_source: dict[str, int]
    prompt_tokens_cached: int
    #: scheduled tokens of each non-empty step
    iteration_tokens: HistogramSnapshot
    #: finished requests by reason ("length", "abort")
    request_success: dict[str, int]
    #: engine seconds of compute by class ("prefill", "decode")
    compute_s: dict[str, float]
    prefill_compute_share: float
    #: restores loaded from the host tier (the simulator's, a twin's KV connector's)
    restores_done: int
    #: restores that waited `restore_max_wait_s` and were admitted to recompute
    restores_recomputed: int
    steps: int
    empty_steps: int
    #: engine seconds of non-empty steps (the GPU busy)
    busy_s: float
    #: whether the last step kept the GPU busy
    gpu_busy: bool
    vruntime_prefill: float
    vruntime_decode: float
    #: False once the engine core died behind a live server (fault `dead_core`): the page
    #: then carries none of the engine's own series
    core_alive: bool = True
    #: KV blocks the host tier holds now (0: no host tier)
    host_tier_blocks: int = 0


@dataclass(frozen=True, slots=True)
class AdvanceResult:
    """What `SimEngine.advance` did over many steps (the lean path for drivers)."""

    #: engine time after the last step
    now_s: float
    steps: int
    empty_steps: int
    generation_tokens: int
    #: end time of the last step that generated tokens / kept the GPU busy (None: none did)
    last_token_s: float | None
    last_busy_s: float | None
    #: request id -> finish reason, for requests that finished during the call
    finished: dict[str, str] = field(default_factory=dict)


class SimRequestError(EngineError):
    """A request the engine cannot take (empty, too long, duplicate id, bad max_tokens)."""


def check_request_id(request_id: str, in_use: Container[str]) -> None:
    """SimRequestError for a request id `in_use` (the driver's bookkeeping, every core's)."""
    if request_id in in_use:
        raise SimRequestError(f"request id {request_id!r} is already in use")


def check_request(
    request_id: str, prompt_tokens: int, max_tokens: int, longest: int, in_use: Container[str]
) -> None:
    """The checks every core makes of a request before it queues it, with one message each:
    SimRequestError for an id `in_use`, an empty prompt, one of `longest` tokens or more (the
    longest request, prompt plus output, the core can ever hold) or `max_tokens` below 1."""
    check_request_id(request_id, in_use)
    if prompt_tokens < 1:
        raise SimRequestError("empty prompt", "send at least one token")
    if prompt_tokens >= longest:
        raise SimRequestError(
            f"prompt of {prompt_tokens} tokens is too long (engine holds {longest - 1} at most)",
            "shorten the prompt or raise the engine's max_model_len or its KV blocks",
        )
    if max_tokens < 1:
        raise SimRequestError(f"max_tokens must be at least 1, got {max_tokens}")
