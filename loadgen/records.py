"""Turn records: the `turns.jsonl` contract, an append-and-flush writer, and a reader.

One JSON object per finished turn (whatever its outcome), written the moment the turn ends and
flushed, so a crash or Ctrl-C loses nothing already finished. Times are wall seconds since the
run start; chunk times are relative to the turn's start. Reports read these files offline.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field

Outcome = Literal["ok", "timeout", "http_error", "stream_error", "connect_error", "aborted"]
OUTCOMES: tuple[Outcome, ...] = (
    "ok",
    "timeout",
    "http_error",
    "stream_error",
    "connect_error",
    "aborted",
)

TURNS_FILE = "turns.jsonl"


class TurnRecord(BaseModel):
    """One request of one agent, as written to turns.jsonl."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: int = Field(description="Agent index, from 0.")
    session: int = Field(description="Conversation index of the agent, from 0.")
    turn: int = Field(description="Turn index within the session, from 0.")
    attempt: int = Field(description="0 for the first try of a turn, then 1, 2... for retries.")
    t_start: float = Field(description="Request start, wall seconds since the run start.")
    t_end: float = Field(description="Request end (any outcome), wall seconds since run start.")
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

    @property
    def streamed_tokens(self) -> int:
        """Tokens counted over the streamed chunks."""
        return sum(n for _, n in self.chunks)


class RecordWriter:
    """Appends records to a turns.jsonl file, one flushed line each."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def write(self, record: TurnRecord) -> None:
        self._file.write(record.model_dump_json() + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_records(path: Path) -> list[TurnRecord]:
    """All records of a turns.jsonl file (a directory means its turns.jsonl).

    A last line cut short (the process died while writing it) is skipped.
    """
    if path.is_dir():
        path = path / TURNS_FILE
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(TurnRecord.model_validate(json.loads(line)))
        except ValueError:
            if number == len(lines):
                break  # a line cut short by a crash mid-write: everything before it stands
            raise
    return records
