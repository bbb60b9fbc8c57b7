"""Trace files: the request logs load tools share, as typed lines, read and written here.

Two formats, one JSON object per line:

- `mooncake_trace` (AIPerf's, the Mooncake FAST'25 traces'): `timestamp` (ms since the
  trace's start) or `delay` (ms), `input_length`, `output_length`, `hash_ids` (one id per
  block of the trace's block size, 512 tokens unless said otherwise; requests that share
  leading ids share that prefix), `session_id` for multi-turn sessions (a later turn's
  `input_length` and `hash_ids` describe what it adds after the conversation so far), or
  `text_input` or `messages` (the whole chat, replies not carried) instead of lengths.
- `sessions` (agentic traces: sessions of calls with prompt, completion and cached token
  counts): `session_id`, `timestamp` or `delay` (ms), `prompt_tokens`, `completion_tokens`,
  `cached_tokens` (how many leading tokens of the previous call's prompt and reply this call
  keeps; 0 starts a new context).

A file is one format, told by its first line. A line that does not parse is a `TraceError`
naming the file and the line; nothing is replayed from a file with one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from stallkit.contract.errors import StallkitError, read_text, validation_message

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "MooncakeLine",
    "SessionCall",
    "Trace",
    "TraceError",
    "TraceFormat",
    "TraceReplay",
    "message_text",
    "read_trace",
    "write_trace",
]

#: tokens per `hash_ids` block unless a trace says otherwise (AIPerf's `--isl-block-size`)
DEFAULT_BLOCK_TOKENS = 512

TraceFormat = Literal["mooncake_trace", "sessions"]

_LINE = ConfigDict(frozen=True, extra="forbid")


class TraceError(StallkitError):
    """A trace file is missing, empty, or has a line that does not parse (file and line named)."""


class _Timed(BaseModel):
    model_config = _LINE

    timestamp: int | float | None = Field(
        None, ge=0, description="Arrival, milliseconds since the trace's start."
    )
    delay: int | float | None = Field(
        None,
        ge=0,
        description="Milliseconds after the previous turn of the session ended (after the "
        "previous line's arrival for a line without a session).",
    )

    @model_validator(mode="after")
    def _one_time(self) -> Self:
        if self.timestamp is not None and self.delay is not None:
            raise ValueError("give timestamp or delay, not both")
        return self


class MooncakeLine(_Timed):
    """One request of a `mooncake_trace` file."""

    session_id: str | None = Field(None, description="Multi-turn session the request is a turn of.")
    input_length: int | None = Field(None, ge=1, description="Prompt tokens (new ones, in a turn).")
    output_length: int = Field(ge=1, description="Tokens the reply is made to be.")
    hash_ids: list[int] | None = Field(
        None, description="One id per prompt block; equal leading ids mean a shared prefix."
    )
    text_input: str | None = Field(None, description="The prompt's text, instead of lengths.")
    messages: list[dict[str, Any]] | None = Field(
        None,
        description="The request's whole chat (role and text content each), instead of lengths; "
        "earlier replies are not carried into it.",
    )

    @model_validator(mode="after")
    def _one_prompt(self) -> Self:
        given = [self.input_length, self.text_input, self.messages]
        if sum(x is not None for x in given) != 1:
            raise ValueError("give one of input_length, text_input or messages")
        if self.hash_ids is not None and self.input_length is None:
            raise ValueError("hash_ids need input_length")
        for index, message in enumerate(self.messages or ()):
            if not isinstance(message.get("role"), str):
                raise ValueError(f"messages[{index}] needs a string role")
            message_text(message)  # a content that is no text is this line's error
        return self


def message_text(message: dict[str, Any]) -> str:
    """A chat message's text: its string content, or its text parts joined by newlines."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(
        isinstance(part, dict) and isinstance(part.get("text"), str) for part in content
    ):
        return "\n".join(part["text"] for part in content)
    raise ValueError("a message's content must be text, or a list of text parts")


class SessionCall(_Timed):
    """One call of an agentic session (`sessions` format)."""

    session_id: str = Field(description="The session (agent) the call belongs to.")
    prompt_tokens: int = Field(ge=1, description="The call's whole prompt, tokens.")
    completion_tokens: int = Field(ge=1, description="Tokens the reply is made to be.")
    cached_tokens: int = Field(
        0,
        ge=0,
        description="Leading tokens of the previous call's prompt and reply this call keeps "
        "(a prefix-cache hit); 0 starts a new context.",
    )

    @model_validator(mode="after")
    def _cached_fits(self) -> Self:
        if self.cached_tokens >= self.prompt_tokens:
            raise ValueError(
                f"cached_tokens ({self.cached_tokens}) must be below prompt_tokens "
                f"({self.prompt_tokens})"
            )
        return self


@dataclass(frozen=True)
class Trace:
    """A whole trace file: its format and its lines, each with its line number."""

    path: str
    format: TraceFormat
    mooncake: list[tuple[int, MooncakeLine]] = field(default_factory=list)
    sessions: list[tuple[int, SessionCall]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.mooncake) + len(self.sessions)


_HINT = "each line is one JSON object of the trace's format (see `kit trace --help`)"


def _format_of(first: str) -> TraceFormat:
    try:
        keys = json.loads(first)
    except ValueError:
        return "mooncake_trace"  # the line's own error says what is wrong with it
    return "sessions" if isinstance(keys, dict) and "prompt_tokens" in keys else "mooncake_trace"


def read_trace(path: Path) -> Trace:
    """Every line of a trace file, validated; a TraceError names the first bad one."""
    try:
        lines = read_text(path, TraceError).splitlines()
    except FileNotFoundError:
        raise TraceError(f"trace {path} does not exist", "check the path") from None
    except OSError as exc:
        raise TraceError(
            f"cannot read trace {path}: {exc.strerror or exc}", "name a JSONL text file"
        ) from None
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    if not numbered:
        raise TraceError(f"trace {path} has no lines", _HINT)
    fmt = _format_of(numbered[0][1])
    model: type[MooncakeLine] | type[SessionCall] = (
        SessionCall if fmt == "sessions" else MooncakeLine
    )
    parsed: list[tuple[int, MooncakeLine | SessionCall]] = []
    for number, line in numbered:
        try:
            parsed.append((number, model.model_validate_json(line)))
        except ValidationError as exc:
            what = validation_message(exc, default="line")
            raise TraceError(f"{path}:{number}: {what} ({fmt} line)", _HINT) from None
    if fmt == "sessions":
        calls = [(n, x) for n, x in parsed if isinstance(x, SessionCall)]
        return Trace(path=str(path), format=fmt, sessions=calls)
    requests = [(n, x) for n, x in parsed if isinstance(x, MooncakeLine)]
    return Trace(path=str(path), format=fmt, mooncake=requests)


def write_trace(path: Path, lines: Iterable[MooncakeLine | SessionCall]) -> int:
    """Write trace lines (unset fields left out, as other tools write them); how many."""
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for line in lines:
            out.write(line.model_dump_json(exclude_none=True) + "\n")
            count += 1
    return count


class TraceReplay(BaseModel):
    """What a run replayed of a trace: recorded in its meta (`kit load`: its load.json)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(description="The trace file.")
    sha256: str = Field(description="SHA-256 of the file's bytes.")
    format: TraceFormat = Field(description="mooncake_trace or sessions.")
    requests: int = Field(description="Requests (lines) replayed: those in the window.")
    sessions: int = Field(description="Sessions replayed, one agent each.")
    left_out: int = Field(0, description="Requests the window left out.")
    span_s: float = Field(
        description="Trace seconds from the first to the last arrival the replayed lines give "
        "(timestamps, and delays counted from the start or the previous arrival)."
    )
    start_offset_ms: int | None = Field(None, description="The window's start, trace ms.")
    end_offset_ms: int | None = Field(None, description="The window's end, trace ms.")
    zero_ms: float = Field(0.0, description="The trace millisecond that became the run's start.")
    second_s: float = Field(1.0, description="Load seconds one trace second lasted.")
    text_salt: str = Field(description="Salt of the replayed text (empty: none).")
