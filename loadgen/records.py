"""Turn records for the load generator: the contract's model and reader, and the writer.

The record's shape is the run directory's `turns.jsonl` contract (`stallkit.contract.records`); this
module keeps the names the load generator has always used. One JSON object per finished turn
(whatever its outcome), written the moment the turn ends and flushed, so a crash or Ctrl-C
loses nothing already finished.
"""

from __future__ import annotations

from pathlib import Path

from stallkit.contract.files import TURNS_FILE
from stallkit.contract.jsonl import JsonlWriter
from stallkit.contract.records import OUTCOMES, Outcome, PromptPart, TurnRecord, read_records

__all__ = [
    "OUTCOMES",
    "TURNS_FILE",
    "Outcome",
    "PromptPart",
    "RecordWriter",
    "TurnRecord",
    "read_records",
]


class RecordWriter(JsonlWriter):
    """Appends turn records to a turns.jsonl file, one line each (flushed as `JsonlWriter` says).

    `keep_chunks` > 0: the records written are also kept (up to that many streamed chunks in
    all), so that whoever summarises the file when it is closed need not read it back.
    """

    def __init__(self, path: Path, flush_s: float = 0.0, keep_chunks: int = 0) -> None:
        fresh = not path.exists() or path.stat().st_size == 0
        super().__init__(path, flush_s)
        self._kept: list[TurnRecord] | None = [] if keep_chunks > 0 and fresh else None
        self._room = keep_chunks

    def write(self, item: TurnRecord) -> None:  # type: ignore[override]
        """Append one record and flush it."""
        if self.closed:
            return
        super().write(item)
        if self._kept is None:
            return
        self._room -= len(item.chunks) + 1
        if self._room < 0:  # more than it may keep: the file is read back instead
            self._kept = None
        else:
            self._kept.append(item)

    @property
    def kept(self) -> list[TurnRecord] | None:
        """Every record in the file, in order, when all were kept (None: read the file)."""
        return None if self._kept is None else list(self._kept)

    def __enter__(self) -> RecordWriter:
        return self
