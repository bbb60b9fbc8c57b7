"""A request's scheduling state inside the simulator, and its public `RequestInfo` view."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from stallkit.engine.core.records import RequestInfo, word_at, words_from


class Request:
    """A request's scheduling state (internal)."""

    __slots__ = (
        "arrival_s",
        "blocks",
        "cached_prompt_tokens",
        "chain",
        "deferred_since",
        "first_scheduled_s",
        "first_token_s",
        "host_key",
        "host_only",
        "id",
        "last_step",
        "match_key",
        "match_value",
        "max_outputs",
        "num_computed",
        "num_outputs",
        "num_registered",
        "num_tokens",
        "preemptions",
        "prompt_len",
        "prompt_tail",
        "recompute",
        "split_key",
        "split_value",
        "word_base",
    )

    def __init__(
        self,
        request_id: str,
        prompt_len: int,
        prompt_tail: tuple[str, ...],
        max_outputs: int,
        now_s: float,
    ):
        self.id = request_id
        #: the prompt's length and the tokens of its last, partial block: the full blocks are
        #: known by their hashes (`chain`), so the prompt itself is not kept
        self.prompt_len = prompt_len
        self.prompt_tail = prompt_tail
        #: output tokens so far; their words are a function of the id (`output_word`), so only
        #: the count is kept
        self.num_outputs = 0
        #: prompt plus outputs so far (kept in step with `num_outputs`: read on every pass)
        self.num_tokens = prompt_len
        #: where the request's output words start in the vocabulary (see `output_words`)
        self.word_base = zlib.crc32(request_id.encode())
        self.max_outputs = max_outputs
        self.arrival_s = now_s
        self.chain: list[int] = []
        self.num_computed = 0
        self.num_registered = 0
        # one entry per held block: its cache hash, or None for a plain (partial) block
        self.blocks: list[int | None] = []
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.cached_prompt_tokens = 0
        self.deferred_since: float | None = None
        self.recompute = False
        self.preemptions = 0
        self.last_step = -1
        self.match_key: tuple[int, int] = (-1, -1)
        self.match_value: tuple[int, int] = (0, 0)
        # a restore's prefix split into GPU-cached and host-only blocks, for match_key
        self.split_key: tuple[int, int] = (-1, -1)
        self.split_value: tuple[list[int], list[int]] = ([], [])
        # how many of a restore's blocks only the host tier holds, for match_key
        self.host_key: tuple[int, int] = (-1, -1)
        self.host_only = 0

    def output_word(self, k: int) -> str:
        """Output word `k` (from 0) of this request (= `output_words(id, k, 1)[0]`)."""
        return word_at(self.word_base, k)

    def block_tokens(self, k: int, size: int) -> tuple[str, ...]:
        """The tokens of full block `k` over prompt + outputs (a block past the prompt's full ones)."""
        start, end, plen = k * size, (k + 1) * size, self.prompt_len
        assert end - plen <= self.num_outputs, "a full block holds only tokens already produced"
        if start >= plen:
            return words_from(self.word_base, start - plen, size)
        tail = self.prompt_tail
        assert start >= plen - len(tail), "the prompt's full blocks are known by their hashes"
        return tail[start - (plen - len(tail)) :] + words_from(self.word_base, 0, end - plen)


@dataclass(slots=True)
class StepWork:
    """What the passes of one step scheduled so far."""

    budget: int
    #: the step's number (a request scheduled in it is not scheduled again in the same step)
    step: int = 0
    scheduled: int = 0
    prefill_tokens: int = 0
    decode_seqs: int = 0
    decode_context: int = 0
    prefill_s: float = 0.0
    restored_blocks: int = 0
    preemptions: int = 0
    restores_polled: int = 0


def is_deferred(r: Request) -> bool:
    """A restore waiting for capacity (not yet switched to recompute)."""
    return r.deferred_since is not None and not r.recompute


def request_info(
    r: Request, state: str, reason: str | None, finished_s: float | None
) -> RequestInfo:
    return RequestInfo(
        prompt_tokens=r.prompt_len,
        cached_prompt_tokens=r.cached_prompt_tokens,
        output_tokens=r.num_outputs,
        arrival_s=r.arrival_s,
        first_scheduled_s=r.first_scheduled_s,
        first_token_s=r.first_token_s,
        finished_s=finished_s,
        state=state,
        finish_reason=reason,
        num_preemptions=r.preemptions,
    )
