"""What a trace asks of an engine, before it is replayed (`kit trace stats`).

Requests and sessions; the span from the first to the last arrival; turns per session; prompt
and reply lengths (min, mean, p50, p90, p99, max); token totals; and two prefix-cache hit
figures for an unbounded cache, which answer different questions:

- the token-weighted share of the whole trace's prompt tokens a cache would serve: a turn's
  kept conversation, plus, where a prompt starts afresh, its leading blocks whose ids an
  earlier request already sent. This is what an engine's prefix-cache counters, and a run's
  cached-prompt share, count (tokens served over tokens asked).
- the per-request mean AIPerf's `analyze-trace` prints as its cache hit rate: for each line
  with `hash_ids`, in file order and sessions aside, the share of its blocks before the first
  block no earlier line sent, averaged over those lines. Short requests weigh as much as long
  ones, so on traces whose long prompts share more it reads lower.

Pure: a parsed trace in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.trace import Trace
from stallkit.loadgen.traces.replay import ReplayTurn, sessions_of
from stallkit.loadgen.traces.window import span_s

__all__ = ["Distribution", "TraceStats", "per_request_hit_rate", "trace_stats"]


class Distribution(BaseModel):
    """Summary of one quantity over a trace's requests."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min: float = Field(description="Smallest value.")
    mean: float = Field(description="Mean.")
    p50: float = Field(description="Median (nearest rank).")
    p90: float = Field(description="90th percentile (nearest rank).")
    p99: float = Field(description="99th percentile (nearest rank).")
    max: float = Field(description="Largest value.")

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        """The summary of `values` (all zero when there are none)."""
        if not values:
            return cls(min=0, mean=0, p50=0, p90=0, p99=0, max=0)
        ordered = sorted(values)

        def rank(q: float) -> float:
            return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

        mean = sum(ordered) / len(ordered)
        return cls(
            min=ordered[0], mean=mean, p50=rank(0.5), p90=rank(0.9), p99=rank(0.99), max=ordered[-1]
        )


class TraceStats(BaseModel):
    """What `kit trace stats` reports for one trace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(description="The trace file.")
    format: str = Field(description="mooncake_trace or sessions.")
    block_tokens: int = Field(description="Tokens per hash_ids block the hits are counted at.")
    requests: int = Field(description="Requests (lines).")
    sessions: int = Field(description="Sessions (agents when replayed).")
    turns_per_session: Distribution = Field(description="Requests per session.")
    input_tokens: Distribution = Field(description="Prompt tokens per request.")
    output_tokens: Distribution = Field(description="Reply tokens per request.")
    input_tokens_total: int = Field(description="Prompt tokens over all requests.")
    output_tokens_total: int = Field(description="Reply tokens over all requests.")
    span_s: float = Field(
        description="Trace seconds from the first to the last arrival the lines give "
        "(timestamps, and delays counted from the start or the previous arrival)."
    )
    cache_hit_share: float = Field(
        description="Token-weighted: the share of the whole trace's prompt tokens an unbounded "
        "prefix cache would serve, kept conversation included (0-1); what an engine's "
        "prefix-cache counters and a run's cached-prompt share count."
    )
    cache_hit_rate_per_request: float | None = Field(
        description="Per-request mean, as AIPerf's analyze-trace computes its cache hit rate: "
        "per line with hash_ids (file order, sessions aside) the share of its blocks before "
        "the first one no earlier line sent, averaged (0-1); None: no line has hash_ids."
    )


def _fresh_hits(turn: ReplayTurn, seen: dict[str, int]) -> int:
    """Tokens of a fresh prompt's leading blocks that earlier requests sent already."""
    hits = 0
    for part in turn.content:
        before = seen.get(part.key, 0) if part.key.startswith("b") else 0
        hits += min(before, part.tokens)
        if before < part.tokens:
            break
    return hits


def per_request_hit_rate(trace: Trace) -> float | None:
    """AIPerf analyze-trace's cache hit rate: the mean over lines with hash_ids of the share
    of their blocks before the first block no earlier line sent."""
    seen: set[int] = set()
    rates: list[float] = []
    for _, req in trace.mooncake:
        ids = req.hash_ids or []
        if not ids:
            continue
        first_new = next((i for i, block in enumerate(ids) if block not in seen), len(ids))
        rates.append(first_new / len(ids))
        seen.update(ids)
    return sum(rates) / len(rates) if rates else None


def trace_stats(trace: Trace, block_tokens: int) -> TraceStats:
    """The numbers of `trace` at `block_tokens` tokens per block."""
    sessions = sessions_of(trace, block_tokens, 1.0)
    inputs: list[int] = []
    outputs: list[int] = []
    hits = 0
    seen: dict[str, int] = {}
    for turns in sessions:
        history = 0  # the session's previous prompt and reply
        for turn in turns:
            kept = history if turn.keep_tokens is None else min(turn.keep_tokens, history)
            prompt = kept + turn.new_tokens
            hits += kept if kept else _fresh_hits(turn, seen)
            for part in turn.content:
                seen[part.key] = max(seen.get(part.key, 0), part.tokens)
            inputs.append(prompt)
            outputs.append(turn.output_tokens)
            history = prompt + turn.output_tokens
    total_in = sum(inputs)
    return TraceStats(
        path=trace.path,
        format=trace.format,
        block_tokens=block_tokens,
        requests=len(inputs),
        sessions=len(sessions),
        span_s=span_s(trace),
        turns_per_session=Distribution.of([len(t) for t in sessions]),
        input_tokens=Distribution.of(inputs),
        output_tokens=Distribution.of(outputs),
        input_tokens_total=total_in,
        output_tokens_total=sum(outputs),
        cache_hit_share=hits / total_in if total_in else 0.0,
        cache_hit_rate_per_request=per_request_hit_rate(trace),
    )
