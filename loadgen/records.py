"""Turn records for the load generator: the contract's model and reader, and the writer.

The record's shape is the run directory's `turns.jsonl` contract (`contract.records`); this
module keeps the names the load generator has always used. One JSON object per finished turn
(whatever its outcome), written the moment the turn ends and flushed, so a crash or Ctrl-C
loses nothing already finished.
"""

from __future__ import annotations

from contract.files import TURNS_FILE
from contract.jsonl import JsonlWriter
from contract.records import OUTCOMES, Outcome, PromptPart, TurnRecord, read_records

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
    """Appends turn records to a turns.jsonl file, one line each (flushed as `JsonlWriter` says)."""

    def write(self, item: TurnRecord) -> None:  # type: ignore[override]
        """Append one record and flush it."""
        super().write(item)

    def __enter__(self) -> RecordWriter:
        return self
