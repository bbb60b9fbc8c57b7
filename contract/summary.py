"""The load summary (`summary.json`) and the pure function that computes it from turn records.

Counts by outcome, latency percentiles (time to first token, inter-token latency per token,
end to end), generated-token throughput and the share of prompt tokens the server served from
its cache. Everything derives from the records alone, so a saved run can be summarised offline.

The function lives here, in the contract, rather than in the load generator, so that reports
summarise a saved run's `turns.jsonl` themselves instead of reading `summary.json`: the turn
records are flushed line by line and survive a crash or a kill that a summary written at the
end of the run may not, and old run directories summarise the same way as new ones. The load
generator writes its result as `summary.json`.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import accumulate

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.records import OUTCOMES, Outcome, TurnRecord

__all__ = [
    "ERROR_OUTCOMES",
    "LoadSummary",
    "Percentiles",
    "peak_in_flight",
    "percentiles",
    "summarize",
]

ERROR_OUTCOMES: tuple[Outcome, ...] = ("http_error", "stream_error", "connect_error")


class Percentiles(BaseModel):
    """Distribution of one latency, in seconds (of the run's clock)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(description="Samples (tokens for inter-token latency).")
    mean: float = Field(description="Mean.")
    p50: float = Field(description="Median.")
    p90: float = Field(description="90th percentile.")
    p99: float = Field(description="99th percentile.")
    max: float = Field(description="Largest sample.")


class LoadSummary(BaseModel):
    """The figures of a load run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: int = Field(description="Turn records, retries and failures included.")
    turns_ok: int = Field(description="Requests that completed.")
    errors: int = Field(description="Requests that failed with an HTTP, stream or connect error.")
    timeouts: int = Field(description="Requests aborted after the read timeout.")
    aborted: int = Field(description="Requests cut short by the end of the run.")
    outcomes: dict[str, int] = Field(description="Requests per outcome (every outcome listed).")
    span_s: float = Field(
        description="First request start to last request end, seconds on the run's clock."
    )
    prompt_tokens: int = Field(description="Prompt tokens the server reported.")
    cached_prompt_tokens: int = Field(description="Of those, tokens served from a cache.")
    cached_prompt_pct: float | None = Field(description="Cached share of prompt tokens, in %.")
    generated_tokens: int = Field(description="Tokens received, all outcomes.")
    decode_tok_s: float | None = Field(description="Generated tokens per second of span.")
    prompt_size_mismatches: int = Field(
        description="Requests whose server prompt count differs from the planned count."
    )
    ttft_s: Percentiles | None = Field(description="Time to first token of completed turns.")
    itl_s: Percentiles | None = Field(description="Inter-token latency, weighted per token.")
    e2e_s: Percentiles | None = Field(description="End-to-end latency of completed turns.")
    time_scale: float | None = Field(
        None,
        description="Engine seconds per wall second of the arm (nominal); null for `kit load`.",
    )
    agents: int | None = Field(
        None,
        description="Agents that sent a request (a replayed trace: its sessions that started); "
        "null in files written before it was counted.",
    )
    peak_in_flight: int | None = Field(
        None,
        description="Most requests in flight at once: the concurrency as it really was; null "
        "in files written before it was counted.",
    )


def summarize(records: Sequence[TurnRecord]) -> LoadSummary:
    """Summarise a run's records (any order)."""
    outcomes = Counter(r.outcome for r in records)
    ok = [r for r in records if r.outcome == "ok"]
    reported = [r for r in records if r.prompt_tokens is not None]
    prompt = sum(r.prompt_tokens or 0 for r in reported)
    cached = sum(r.cached_tokens or 0 for r in reported)
    with_cache_info = [r for r in reported if r.cached_tokens is not None]
    generated = sum(_generated(r) for r in records)
    span = max((r.t_end for r in records), default=0.0) - min(
        (r.t_start for r in records), default=0.0
    )
    gaps, weights = _inter_token_gaps(ok)
    return LoadSummary(
        requests=len(records),
        turns_ok=len(ok),
        errors=sum(outcomes[o] for o in ERROR_OUTCOMES),
        timeouts=outcomes["timeout"],
        aborted=outcomes["aborted"],
        outcomes={o: outcomes[o] for o in OUTCOMES},
        span_s=span,
        prompt_tokens=prompt,
        cached_prompt_tokens=cached,
        cached_prompt_pct=100.0 * cached / prompt if with_cache_info and prompt else None,
        generated_tokens=generated,
        decode_tok_s=generated / span if span > 0 else None,
        prompt_size_mismatches=sum(r.prompt_tokens != r.expected_prompt_tokens for r in reported),
        ttft_s=percentiles([r.ttft_s for r in ok if r.ttft_s is not None]),
        itl_s=percentiles(gaps, weights),
        e2e_s=percentiles([r.t_end - r.t_start for r in ok]),
        agents=len({r.agent for r in records}),
        peak_in_flight=peak_in_flight(records),
    )


def peak_in_flight(records: Sequence[TurnRecord]) -> int:
    """The most requests in flight at once (one that ends as another starts is not counted
    with it)."""
    # at equal times an end (-1) sorts before a start (+1)
    edges = sorted([(r.t_start, 1) for r in records] + [(r.t_end, -1) for r in records])
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def _generated(record: TurnRecord) -> int:
    if record.completion_tokens is not None:
        return record.completion_tokens
    return record.streamed_tokens


def _inter_token_gaps(records: Iterable[TurnRecord]) -> tuple[list[float], list[int]]:
    """Per chunk after the first: the gap divided by its tokens, weighted by its tokens."""
    gaps: list[float] = []
    weights: list[int] = []
    for record in records:
        for (t_prev, _), (t, n) in zip(record.chunks, record.chunks[1:], strict=False):
            if n > 0:
                gaps.append((t - t_prev) / n)
                weights.append(n)
    return gaps, weights


def percentiles(
    values: Sequence[float], weights: Sequence[int] | None = None
) -> Percentiles | None:
    """Weighted nearest-rank percentiles (each value counts ``weight`` times); None if empty."""
    if not values:
        return None
    w = list(weights) if weights is not None else [1] * len(values)
    pairs = sorted(zip(values, w, strict=True))
    total = sum(w)
    # the weight counted up to and including each pair (weights are counts: never negative)
    seen = list(accumulate(weight for _, weight in pairs))

    def rank(q: float) -> float:
        at = bisect_left(seen, max(1, math.ceil(q * total)))  # the first pair that reaches it
        return pairs[at][0] if at < len(pairs) else pairs[-1][0]

    mean = sum(v * k for v, k in pairs) / total
    return Percentiles(
        count=total, mean=mean, p50=rank(0.5), p90=rank(0.9), p99=rank(0.99), max=pairs[-1][0]
    )
