"""Runs and workloads written as traces: a run's turns as a `mooncake_trace`, the synthetic
workload as a `sessions` trace.

`mooncake_lines` turns a run's records into AIPerf's format: one session per conversation
(agent and session), its first turn at its `timestamp`, each later turn a `delay` after the
previous one ended; a turn's `input_length` is what it added to its session's prompt and its
`hash_ids` name those tokens' blocks. A block's id stands for its content and everything
before it (the ids chain), so two prompts that began with the same content (a shared system
prompt, the same trace blocks) get the same leading ids, and nothing else does. A failed turn
added nothing to its conversation and is left out, unless nothing came after it.

`workload_calls` writes the synthetic model's plans (per agent: sizes, replies, pauses,
session restarts) as `sessions` calls, so a kit's workload can be replayed, edited or handed
to another tool. Pure code: records and configs in, trace lines out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import islice

from stallkit.contract.records import PromptPart, TurnRecord
from stallkit.contract.trace import MooncakeLine, SessionCall, TraceError
from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.workload import plan_agent, start_offset_s

__all__ = ["BlockNamer", "mooncake_lines", "workload_calls"]


class BlockNamer:
    """Names the blocks of content: the same content after the same blocks, the same id."""

    def __init__(self, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self._ids: dict[tuple[int | None, tuple[tuple[str, int, int], ...]], int] = {}

    def ids(self, parts: Sequence[PromptPart]) -> list[int]:
        """The hash ids of the blocks `parts` fill, in order (the last one may be partial)."""
        ids: list[int] = []
        parent: int | None = None
        block: list[tuple[str, int, int]] = []
        filled = 0
        for part in parts:
            pos = 0
            while pos < part.tokens:
                take = min(self.block_tokens - filled, part.tokens - pos)
                block.append((part.key, pos, pos + take))
                filled, pos = filled + take, pos + take
                if filled == self.block_tokens:
                    parent = self._name(parent, block)
                    ids.append(parent)
                    block, filled = [], 0
        if block:
            ids.append(self._name(parent, block))
        return ids

    def _name(self, parent: int | None, block: list[tuple[str, int, int]]) -> int:
        return self._ids.setdefault((parent, tuple(block)), len(self._ids))


def _ms(seconds: float) -> float:
    # unrounded: on the virtual clock a request a fraction of a millisecond early or late can
    # land in another engine step, and a livelock hangs on such interleavings
    return max(0.0, seconds * 1000)


def _played(records: list[TurnRecord]) -> list[TurnRecord]:
    """A conversation's turns as the engine saw them: each turn that succeeded, and a last turn
    that did not (the request in flight when the run stopped, or timed out at its end)."""
    records.sort(key=lambda r: (r.turn, r.attempt))
    played = [r for r in records if r.outcome == "ok"]
    last = records[-1]
    if last.outcome != "ok" and (not played or played[-1].turn < last.turn):
        played.append(last)
    return played


def mooncake_lines(records: Iterable[TurnRecord], block_tokens: int) -> list[MooncakeLine]:
    """A run's turns as `mooncake_trace` lines, in the order they started.

    A failed turn added nothing to its conversation, so it is left out, unless it is its
    conversation's last (a request a stall held, say): then it is written with the reply
    length it asked for.
    """
    sessions: dict[tuple[int, int], list[TurnRecord]] = defaultdict(list)
    for record in records:
        if record.prompt_parts is None:
            raise TraceError(
                f"turn {record.turn} of agent {record.agent} has no prompt parts",
                "runs recorded before prompt parts were kept cannot be exported; record it again",
            )
        sessions[record.agent, record.session].append(record)
    namer = BlockNamer(block_tokens)
    timed: list[tuple[float, MooncakeLine]] = []
    for (agent, session), group in sorted(
        sessions.items(), key=lambda kv: min((r.t_start, r.agent) for r in kv[1])
    ):
        turns = _played(group)
        for k, record in enumerate(turns):
            parts = record.prompt_parts or []
            # when the client meant to send, not when a step boundary let it
            ready = record.t_start if record.t_ready is None else record.t_ready
            when: dict[str, float] = (
                {"timestamp": _ms(ready)} if k == 0 else {"delay": _ms(ready - turns[k - 1].t_end)}
            )
            ok = record.outcome == "ok" and record.completion_tokens
            line = MooncakeLine(
                session_id=f"a{agent}.s{session}",
                input_length=max(1, sum(p.tokens for p in parts)),
                output_length=(record.completion_tokens if ok else None) or record.max_tokens,
                hash_ids=namer.ids(parts),
                **when,
            )
            timed.append((record.t_start, line))
    timed.sort(key=lambda item: item[0])
    return [line for _, line in timed]


def workload_calls(cfg: LoadConfig, turns_per_agent: int) -> list[SessionCall]:
    """The synthetic workload's first `turns_per_agent` turns of each agent as `sessions` calls."""
    calls: list[SessionCall] = []
    for agent in range(cfg.agents):
        previous = None
        for plan in islice(plan_agent(cfg, agent), turns_per_agent):
            if previous is None:
                when = {"timestamp": start_offset_s(cfg, agent) * 1000}
            else:
                when = {"delay": previous.think_s * 1000}
            cached = 0
            if previous is not None and plan.turn > 0:
                cached = previous.target_prompt_tokens + previous.max_tokens
            calls.append(
                SessionCall(
                    session_id=f"agent-{agent}",
                    prompt_tokens=plan.target_prompt_tokens,
                    completion_tokens=plan.max_tokens,
                    cached_tokens=cached,
                    **when,
                )
            )
            previous = plan
    return calls
