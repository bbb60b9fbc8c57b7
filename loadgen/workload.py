"""The workload model: what each agent asks for, turn by turn, from a seeded random source.

Pure code: no I/O and no clock. An agent's plan depends only on the run seed and the agent's
index, never on what the server answered, so two engines driven with the same seed see the same
sequence of requests (prompt sizes, reply lengths, pauses, texts). Prompt sizes are planned as
totals: turn k+1 targets turn k's prompt plus its reply plus the new content; the prompt sizer
then makes the real conversation hit that total exactly, whatever the reply really was.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from stallkit.loadgen import text
from stallkit.loadgen.config import LoadConfig


@dataclass(frozen=True, slots=True)
class Content:
    """A stretch of a replayed turn's new content: the same key, the same words."""

    #: names the content: `b<id>` a trace's hash-id block, `t<line>` a line's own tokens
    key: str
    tokens: int
    #: the words themselves when the trace gave text (else drawn from the key)
    literal: tuple[str, ...] | None = None
    #: the replay's text salt: equal keys give equal words only under the same salt
    salt: str = ""

    def words(self, tokens_per_word: float = 1.0) -> list[str]:
        """The part's words: a prefix-stable stream per key and salt, so equal keys share a
        prefix within a replay.

        One word per token (the simulator's and the twin's count), or as many as make its
        tokens under a tokenizer that spends `tokens_per_word` on a word.
        """
        if self.literal is not None:
            return list(self.literal[: self.tokens])
        count = max(1, round(self.tokens / tokens_per_word)) if self.tokens else 0
        return text.trace_words(self.key, count, self.salt)


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """One planned request of one agent."""

    agent: int
    session: int
    turn: int
    #: Exact prompt size in tokens the request should have (chat template included).
    target_prompt_tokens: int
    #: Reply length asked for.
    max_tokens: int
    #: Pause after this turn before the next request (wall seconds).
    think_s: float
    #: Seed of this turn's new content text.
    text_seed: int
    #: Seed of the session's system prompt (equal across agents with a shared prompt).
    system_seed: int
    #: Trace replay: the turn's new content (None: drawn from `text_seed` to the target).
    content: tuple[Content, ...] | None = None
    #: Trace replay: leading tokens of the previous prompt and reply kept (None: all).
    keep_tokens: int | None = None
    #: Trace replay: the next turn starts no earlier than this (seconds since the run start).
    resume_at_s: float | None = None
    #: Trace replay: the request's whole chat as (role, text), sent as it is over HTTP.
    messages: tuple[tuple[str, str], ...] | None = None


def agent_rng(seed: int, agent: int) -> random.Random:
    """The random source of one agent (string seeds hash deterministically across runs)."""
    return random.Random(f"stallkit:{seed}:agent:{agent}")


def start_offset_s(cfg: LoadConfig, agent: int) -> float:
    """When the agent starts, in seconds after the run start: staggered with a seeded jitter."""
    if cfg.stagger_s == 0:
        return 0.0
    jitter = random.Random(f"stallkit:{cfg.seed}:stagger:{agent}").uniform(0.0, cfg.stagger_s)
    return agent * cfg.stagger_s + jitter


def plan_agent(cfg: LoadConfig, agent: int) -> Iterator[TurnPlan]:
    """The agent's endless sequence of turns (callers stop it by duration or max_turns)."""
    rng = agent_rng(cfg.seed, agent)
    shared_system_seed = random.Random(f"stallkit:{cfg.seed}:system").getrandbits(64)
    session = 0
    while True:
        system_seed = shared_system_seed if cfg.shared_system_prompt else rng.getrandbits(64)
        max_tokens = _reply(cfg, rng)
        target = _session_start(cfg, rng, max_tokens)
        turn = 0
        while True:
            yield TurnPlan(
                agent=agent,
                session=session,
                turn=turn,
                target_prompt_tokens=target,
                max_tokens=max_tokens,
                think_s=rng.uniform(cfg.think_min_s, cfg.think_max_s),
                text_seed=rng.getrandbits(64),
                system_seed=system_seed,
            )
            new_tokens = rng.randint(cfg.new_tokens_min, cfg.new_tokens_max)
            next_reply = _reply(cfg, rng)
            next_target = target + max_tokens + new_tokens
            if next_target + next_reply > cfg.max_context:
                break
            target, max_tokens, turn = next_target, next_reply, turn + 1
        session += 1


def _reply(cfg: LoadConfig, rng: random.Random) -> int:
    return rng.randint(cfg.reply_tokens_min, cfg.reply_tokens_max)


def _session_start(cfg: LoadConfig, rng: random.Random, max_tokens: int) -> int:
    spread = int((cfg.max_context - cfg.min_context) * cfg.restart_spread)
    target = rng.randint(cfg.min_context, cfg.min_context + spread)
    return min(target, cfg.max_context - max_tokens)
