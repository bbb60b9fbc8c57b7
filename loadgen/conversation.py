"""One agent's conversation, built turn by turn from the planner's seeds, on either clock.

What a prompt holds is decided here, once: a session opens with its system prompt, drawn from
the plan's `system_seed` (which the planner makes the same for every agent when the load sets
`shared_system_prompt`, so the agents then share that prefix), and each turn adds its new
content, drawn from the plan's `text_seed`, after the previous turn's prompt and reply. Two
renderings of that one rule:

- `ChatConversation`: chat messages, for the HTTP agents (`stallkit.loadgen.agents`), whose new content the
  prompt sizer fits to the planned token count with the server's tokenizer;
- `WordConversation`: the simulator's tokens themselves (one word each), for the virtual clock,
  so every prompt is the planned size exactly with no tokenizer. Its words are slices of one
  fixed pool of distinct words, and a session's first tokens name its system seed (and the
  agent, unless the prompt is shared), so two conversations share a cache block only where
  they share a prefix. Deterministic: the same plans give the same tokens.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

from stallkit.contract.records import PromptPart
from stallkit.loadgen import text
from stallkit.loadgen.agent import Send
from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.tokens import Message
from stallkit.loadgen.workload import TurnPlan

__all__ = [
    "ChatConversation",
    "WordConversation",
    "new_parts",
    "pool_words",
    "replay_parts",
    "system_text",
]

#: distinct words the virtual clock's prompts are cut from
POOL_SIZE = 400_000


def system_text(cfg: LoadConfig, plan: TurnPlan) -> str:
    """The system prompt of the session `plan` opens (shared when the load says so)."""
    return text.text(plan.system_seed, cfg.system_prompt_tokens)


def new_parts(plan: TurnPlan, system_tokens: int, new_tokens: int) -> list[PromptPart]:
    """What a synthetic turn adds to its prompt: a session's system prompt, then new text."""
    parts = [PromptPart(key=f"text:{plan.text_seed}", tokens=new_tokens)]
    if plan.turn == 0:
        parts.insert(0, PromptPart(key=f"system:{plan.system_seed}", tokens=system_tokens))
    return parts


def replay_parts(plan: TurnPlan) -> list[PromptPart]:
    """What a replayed turn adds to its prompt: its trace blocks and own tokens."""
    return [PromptPart(key=part.key, tokens=part.tokens) for part in plan.content or ()]


@dataclass
class ChatConversation:
    """One session's chat messages; the last reply waits to be sent with the next turn."""

    history: list[Message] = field(default_factory=list)
    history_tokens: int | None = None
    pending_reply: Message | None = None

    @classmethod
    def start(cls, cfg: LoadConfig, plan: TurnPlan) -> ChatConversation:
        """The conversation of the session `plan` (its first turn) opens: its system prompt."""
        return cls(history=[{"role": "system", "content": system_text(cfg, plan)}])


@cache
def _pool() -> tuple[str, ...]:
    return tuple(f"w{i}" for i in range(POOL_SIZE))


def pool_words(seed: int, count: int) -> tuple[str, ...]:
    """`count` consecutive words of the pool, from a start the seed draws."""
    pool = _pool()
    count = max(0, min(count, len(pool)))
    start = random.Random(seed).randrange(0, len(pool) - count + 1)
    return pool[start : start + count]


class WordConversation:
    """One agent's conversation as the simulator's tokens: the prompt of each of its sends."""

    def __init__(self, cfg: LoadConfig, agent: int) -> None:
        self.cfg = cfg
        # the session's header names the agent only when prompts are not shared, so that a
        # shared system prompt is one prefix across agents
        self._who = "shared" if cfg.shared_system_prompt else f"a{agent}"
        # the tokens of the last prompt (kept as one list, so a turn extends it instead of
        # copying it) and how many of them the last finished turn (prompt and reply) covers
        self._tokens: list[str] = []
        self._history_len = 0
        # the request whose prompt and reply those are (the engine reuses its block hashes)
        self._history_id: str | None = None
        #: what the last prompt added to the conversation (for its turn record)
        self.parts: list[PromptPart] = []

    def prompt(self, send: Send) -> list[str]:
        """The send's prompt: the conversation so far (or a new system prompt), new content.

        The conversation's own list, not a copy: an engine core keeps no reference to it.
        """
        plan = send.plan
        tokens = self._tokens
        if plan.turn == 0 and send.attempt == 0:
            self._history_len, self._history_id = 0, None
        if plan.content is not None:  # a replayed turn: the kept history, then its parts
            keep = self._history_len if plan.keep_tokens is None else plan.keep_tokens
            del tokens[min(keep, self._history_len) :]
            for part in plan.content:
                tokens += part.words()
            self.parts = replay_parts(plan)
            return tokens
        if plan.turn == 0:
            tokens[:] = ("<|system|>", self._who, f"s{plan.system_seed}")
            tokens += pool_words(plan.system_seed, self.cfg.system_prompt_tokens - 3)
        else:
            del tokens[self._history_len :]
        system = len(tokens) if plan.turn == 0 else 0
        tokens += pool_words(plan.text_seed, plan.target_prompt_tokens - len(tokens))
        self.parts = new_parts(plan, system, len(tokens) - (system or self._history_len))
        return tokens

    def continues(self, send: Send) -> str | None:
        """The finished request the send's prompt begins with (None for a session's first)."""
        return self._history_id if send.plan.turn else None

    def answered(self, request_id: str, reply: Sequence[str]) -> None:
        """The send's request finished with `reply`: the next turn continues after it."""
        self._tokens += reply
        self._history_len = len(self._tokens)
        self._history_id = request_id
