"""The turn record: one line of `turns.jsonl` per finished request, whatever its outcome.

Written by the load generator the moment a turn ends (HTTP agents and virtual-clock arms
alike), read by the summaries and the reports. Times are seconds since the run start, on the
run's clock (wall seconds for an HTTP arm, engine seconds for a virtual-clock arm); chunk times
are relative to the turn's start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.files import TURNS_FILE
from stallkit.contract.jsonl import read_jsonl

__all__ = ["OUTCOMES", "Outcome", "PromptPart", "TurnRecord", "read_records"]

Outcome = Literal["ok", "timeout", "http_error", "stream_error", "connect_error", "aborted"]
OUTCOMES: tuple[Outcome, ...] = (
    "ok",
    "timeout",
    "http_error",
    "stream_error",
    "connect_error",
    "aborted",
)


class PromptPart(BaseModel):
    """A stretch of the content a turn adds to its prompt: the same key, the same tokens.

    A session's first turn adds its whole prompt (a system prompt, say, then a user
    message); a later turn adds what follows the session's previous prompt and reply. Two
    parts with one key hold the same tokens from their start (a shorter one is a prefix of
    the longer), so the prompts' shared blocks can be named again (`kit trace export`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(description="Names the content (a shared system prompt, a trace block).")
    tokens: int = Field(ge=0, description="Tokens of the part (words on the simulator).")


class TurnRecord(BaseModel):
    """One request of one agent, as written to turns.jsonl."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: int = Field(description="Agent index, from 0.")
    session: int = Field(description="Conversation index of the agent, from 0.")
    turn: int = Field(description="Turn index within the session, from 0.")
    attempt: int = Field(description="0 for the first try of a turn, then 1, 2... for retries.")
    t_start: float = Field(description="Request start, seconds since the run start.")
    t_end: float = Field(description="Request end (any outcome), seconds since run start.")
    ttft_s: float | None = Field(description="Time to the first generated token, if any came.")
    chunks: list[tuple[float, int]] = Field(
        description="[seconds since t_start, tokens] per streamed chunk that carried tokens."
    )
    expected_prompt_tokens: int = Field(description="Prompt size the client measured beforehand.")
    prompt_tokens: int | None = Field(description="Prompt tokens reported by the server usage.")
    completion_tokens: int | None = Field(description="Completion tokens reported in usage.")
    cached_tokens: int | None = Field(description="Prompt tokens the server served from cache.")
    max_tokens: int = Field(description="Reply length asked for.")
    outcome: Outcome = Field(description="How the request ended.")
    error: str | None = Field(description="What went wrong (None when ok).")
    status: int | None = Field(description="HTTP status, when a response arrived.")
    t_ready: float | None = Field(
        None,
        description="When the agent was ready to send, seconds since the run start (on the "
        "virtual clock the request starts at the engine's next step; None: at t_start).",
    )
    t_arrival: float | None = Field(
        None,
        exclude_if=lambda v: v is None,  # closed-loop files stay as they were
        description="Open-loop arrivals: when the request was planned to start, seconds since "
        "the run start (its lag is t_start minus this; None: a closed-loop turn).",
    )
    prompt_parts: list[PromptPart] | None = Field(
        None,
        description="What the turn added to its session's prompt, in order (None: not "
        "recorded, as in runs of earlier versions).",
    )

    @property
    def streamed_tokens(self) -> int:
        """Tokens counted over the streamed chunks."""
        return sum(n for _, n in self.chunks)


def read_records(path: Path) -> list[TurnRecord]:
    """All records of a turns.jsonl file (a directory means its turns.jsonl).

    A last line cut short (the process died while writing it) is skipped; any other bad line
    is a RunFileError naming the file and line.
    """
    if path.is_dir():
        path = path / TURNS_FILE
    return read_jsonl(path, TurnRecord)
