"""Reading and writing the files of a run directory: one JSONL writer, one reader, JSON files.

The JSONL writer appends one JSON object per line and flushes each, so a crash or Ctrl-C loses
nothing already written; a writer fed thousands of lines a second (a virtual-clock arm) may
instead flush at most every `flush_s` wall seconds, and on close (an exception or Ctrl-C still
closes it), so only a killed process loses its last fraction of a second. The reader validates
each line against the file's model; a last line that does not parse is the one a crash cut
short and is skipped (everything before it stands), while a bad line anywhere else is a
`RunFileError` naming the file and the line. JSON files are
written whole through a temporary file and a rename, so a reader never sees half of one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from stallkit.contract.errors import RunFileError, is_invalid_json, validation_message

__all__ = [
    "JsonlWriter",
    "append_jsonl",
    "jsonl_text",
    "read_json",
    "read_jsonl",
    "write_json",
]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Line = BaseModel | Mapping[str, Any]

_DAMAGED = "the file was changed or damaged after the run; restore it or remove the line"


def _line(item: Line) -> str:
    if isinstance(item, BaseModel):
        return item.model_dump_json() + "\n"
    return json.dumps(item, separators=(",", ":")) + "\n"


def jsonl_text(items: Iterable[Line]) -> str:
    """The JSONL text of `items`, one line each (for a file written in one go)."""
    return "".join(_line(item) for item in items)


class JsonlWriter:
    """Appends lines to a JSONL file, each flushed as it is written; a context manager.

    `flush_s` > 0: a line is flushed with the first line written `flush_s` wall seconds or
    more after the last flush, and at `close` (for writers fed far faster than a reader looks).
    Safe to share between threads; a write after `close` is dropped (the run is ending).
    """

    def __init__(self, path: Path, flush_s: float = 0.0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._flush_s = flush_s
        self._flushed = time.monotonic()

    def write(self, item: Line) -> None:
        """Append one line and flush it (or, with `flush_s`, when that much time has passed)."""
        self.write_text(_line(item))

    def write_text(self, text: str) -> None:
        """Append one line's JSON text, as `write` does (with its newline if it has none)."""
        if not text.endswith("\n"):
            text += "\n"
        with self._lock:
            if self._file.closed:
                return
            self._file.write(text)
            if self._flush_s > 0:
                now = time.monotonic()
                if now - self._flushed < self._flush_s:
                    return
                self._flushed = now
            self._file.flush()

    @property
    def closed(self) -> bool:
        """Whether the file was closed (later writes are dropped)."""
        return self._file.closed

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._file.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def append_jsonl(path: Path, item: Line) -> None:
    """Append one line to a JSONL file (opened and closed for it)."""
    with JsonlWriter(path) as writer:
        writer.write(item)


def _adapter(model: type[T] | TypeAdapter[T]) -> TypeAdapter[T]:
    return model if isinstance(model, TypeAdapter) else TypeAdapter(model)


def read_jsonl(path: Path, model: type[T] | TypeAdapter[T], *, missing_ok: bool = False) -> list[T]:
    """Every line of a JSONL file as `model`; a torn last line is skipped.

    Raises RunFileError when the file is missing (unless `missing_ok`: then no lines) or a
    line other than the last is not valid JSON or does not fit the model.
    """
    adapter = _adapter(model)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        if missing_ok:
            return []
        raise RunFileError(f"{path} is missing", "is this a stallkit run directory?") from None
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    out: list[T] = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(adapter.validate_json(line))
        except ValidationError as exc:
            if index == last and _is_torn(line):
                break  # the line a crash cut short: everything before it stands
            raise RunFileError(f"{path}:{index + 1}: {_what(exc)}", _DAMAGED) from None
    return out


def _is_torn(line: str) -> bool:
    """A line cut short mid-write does not parse as JSON at all."""
    try:
        json.loads(line)
    except ValueError:
        return True
    return False


def _what(exc: ValidationError) -> str:
    return validation_message(exc, default="")


def write_json(path: Path, item: BaseModel) -> None:
    """Write a model as an indented JSON file, atomically (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(item.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_json(path: Path, model: type[M]) -> M:
    """A JSON file as `model`; RunFileError (naming the file) when missing or bad."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunFileError(
            f"{path} is missing", "is this a run directory written by `kit run`?"
        ) from None
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        if is_invalid_json(exc):
            raise RunFileError(
                f"{path} is not valid JSON", "was the run interrupted while writing?"
            ) from None
        raise RunFileError(f"{path}: {_what(exc)}", "is this a stallkit run directory?") from None
