"""What `kit engine calibrate` sends, and how its timings become cost samples (pure).

A calibration measures two kinds of step on a real engine. A *prefill probe* is one request
alone, `max_tokens` 1: its prefill time is the steps that compute its prompt (one, or several
chunks of the per-step budget, each with the context before it). A *decode probe* is `batch`
requests started together: once all of them are decoding and none has finished, every step
decodes `batch` sequences, so the time a stream takes per token in that window is one step.
The probes fit the engine's sizes (the longest request, the running slots, the per-step
budget, the KV pool), so no request is preempted. Timings come in as numbers and stream
points; nothing here sends a request or reads a clock.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from stallkit.engine import CostModel, CostSample

__all__ = [
    "CalibrateOptions",
    "DecodeProbe",
    "EngineSizes",
    "PrefillProbe",
    "StreamPoint",
    "decode_rates",
    "decode_sample",
    "plan_probes",
    "prefill_chunks",
    "prefill_sample",
]

#: the shortest prompt a probe sends
MIN_PROMPT_TOKENS = 16
#: prefill lengths up to one step's budget, spaced geometrically
SINGLE_STEP_LENGTHS = 6


class CalibrateOptions(BaseModel):
    """How `kit engine calibrate` measures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repeats: int = Field(3, ge=1, le=50, description="Repetitions of every probe (median).")
    decode_tokens: int = Field(
        64, ge=8, le=4096, description="Tokens each request of a decode batch generates."
    )
    max_batch: int = Field(8, ge=1, description="Largest decode batch (1, 2, 4, ... up to it).")
    max_num_batched_tokens: int | None = Field(
        None, gt=0, description="The engine's per-step budget (default: its flag, else 2048)."
    )
    vocab_size: int | None = Field(
        None,
        gt=8,
        description="Token ids are drawn below this (default: the model's config.json, else 1000).",
    )
    seed: int = Field(0, description="Seed of the random prompts.")
    empty_step_s: float | None = Field(
        None,
        gt=0,
        description="Engine seconds of a step that schedules nothing (default: timed on the "
        "installed vLLM's scheduler, else 3 ms).",
    )
    request_timeout_s: float = Field(120.0, gt=0, description="Wall seconds per request.")


@dataclass(frozen=True)
class EngineSizes:
    """The sizes of the engine being calibrated (vLLM's own flags)."""

    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    #: usable KV blocks (vLLM's null block excluded); None: not known, not limiting
    pool_blocks: int | None = None


@dataclass(frozen=True)
class PrefillProbe:
    """One request of `prompt_tokens` that generates one token."""

    prompt_tokens: int

    @property
    def label(self) -> str:
        return f"prefill {self.prompt_tokens}"


@dataclass(frozen=True)
class DecodeProbe:
    """`batch` requests of `prompt_tokens` each, generating `decode_tokens` each."""

    batch: int
    prompt_tokens: int
    decode_tokens: int

    @property
    def label(self) -> str:
        return f"decode {self.batch}x{self.prompt_tokens}"


@dataclass(frozen=True)
class StreamPoint:
    """A streamed chunk: when it arrived (seconds, any origin) and the tokens generated so far."""

    at_s: float
    tokens: int


def _geometric(low: int, high: int, count: int) -> list[int]:
    if high <= low:
        return [high] if high > 0 else []
    ratio = (high / low) ** (1 / (count - 1))
    return sorted({round(low * ratio**i) for i in range(count)} | {high})


def plan_probes(
    sizes: EngineSizes, decode_tokens: int, max_batch: int
) -> tuple[list[PrefillProbe], list[DecodeProbe]]:
    """Prefills of several lengths (up to one step's budget, and longer, chunked, where the
    engine allows) and decode batches of 1, 2, 4, ... sequences at three prompt lengths each."""
    longest = sizes.max_model_len - 1
    if sizes.pool_blocks is not None:
        longest = min(longest, sizes.pool_blocks * sizes.block_size - 1)
    single = min(longest, sizes.max_num_batched_tokens)
    lengths = _geometric(MIN_PROMPT_TOKENS, single, SINGLE_STEP_LENGTHS)
    if longest > single:  # chunked: the later chunks carry the earlier ones as context
        lengths += sorted({min(longest, single + single // 2), longest} - set(lengths))
    prefills = [PrefillProbe(n) for n in lengths]
    decodes = []
    batch = 1
    while batch <= min(sizes.max_num_seqs, max_batch):
        top = sizes.max_model_len - decode_tokens - 1
        if sizes.pool_blocks is not None:  # every request's blocks at once, with one to spare
            top = min(top, (sizes.pool_blocks // batch) * sizes.block_size - decode_tokens - 1)
        decodes += [
            DecodeProbe(batch, p, decode_tokens) for p in _geometric(MIN_PROMPT_TOKENS, top, 3)
        ]
        batch *= 2
    return prefills, decodes


def prefill_chunks(prompt_tokens: int, budget: int) -> list[tuple[int, int]]:
    """The (new tokens, context) chunks a prompt is prefilled in under a per-step budget."""
    return [(min(budget, prompt_tokens - done), done) for done in range(0, prompt_tokens, budget)]


def prefill_sample(probe: PrefillProbe, budget: int, seconds: float) -> CostSample:
    """The sample of a prefill that took `seconds`, over the steps of its chunks."""
    steps: list[tuple[list[tuple[int, int]], list[int]]] = [
        ([chunk], []) for chunk in prefill_chunks(probe.prompt_tokens, budget)
    ]
    return CostSample.of_steps(steps, seconds, probe.label)


def decode_sample(
    probe: DecodeProbe, streams: Sequence[Sequence[StreamPoint]]
) -> CostSample | None:
    """The sample of a decode batch from its streams, or None when no window had every
    request decoding (a stream that ended early, an engine that ran them one after another).

    The window opens when the last request has its first token (every prefill is done) and
    closes when the first request has its last one. Within it, each stream's seconds per
    token is one step; the median over the streams is the step time. The step's context is
    the mean over the window of each sequence's prompt plus the tokens before the new one.
    """
    if len(streams) != probe.batch or any(not s for s in streams):
        return None
    opens = max(s[0].at_s for s in streams)
    closes = min(s[-1].at_s for s in streams)
    per_token: list[float] = []
    contexts: list[int] = []
    for stream in streams:
        inside = [p for p in stream if opens < p.at_s <= closes]
        if len(inside) < 2 or inside[-1].tokens <= inside[0].tokens:
            return None
        first, last = inside[0], inside[-1]
        per_token.append((last.at_s - first.at_s) / (last.tokens - first.tokens))
        # the step making token k attends over the prompt and the k - 1 tokens before it
        contexts.append(round(probe.prompt_tokens + (first.tokens + last.tokens - 1) / 2))
    return CostSample.of([], contexts, statistics.median(per_token), probe.label)


def decode_rates(cost: CostModel, batches: Sequence[int], context: int) -> list[tuple[int, float]]:
    """Decode tokens per second the cost model implies at each batch size, every sequence
    at `context` tokens."""
    return [(n, n / cost.step_s([], [context] * n)) for n in batches]
