"""The tool's one exception tree, and the one way a pydantic validation error becomes a line.

Every failure a user can cause or fix (bad input, an unreachable engine, a missing run
directory) is a `StallkitError`: a message and a hint, printed by the command line as one red
line and exit code 2, never as a traceback. Each role subclasses the root, so a caller may
catch one role's failures or all of them::

    StallkitError                     stallkit.contract.errors: message + hint
    ├── RunFileError                  stallkit.contract.errors: a run-directory file is missing or bad
    ├── GpuSourceError                stallkit.contract.gpu: a GPU-source spec that does not parse
    ├── TraceError                    stallkit.contract.trace: a trace file is missing or has a bad line
    ├── EngineError                   stallkit.engine.errors: parse, start, reach or stop an engine
    │   ├── SimRequestError           stallkit.engine.sim: a request the simulator cannot take
    │   └── ApiError                  stallkit.engine.serve.api: a request the HTTP front refuses
    ├── LoadError                     stallkit.loadgen.errors: the load cannot start
    ├── MonitorError                  stallkit.monitor.errors: the monitor cannot start
    ├── KitError                      stallkit.kits.errors: a kit, run or A/B request is invalid
    │   └── OverrideError             stallkit.kits.errors: a command-line override does not validate
    └── ReportError                   stallkit.reports.errors: a run directory is missing or unreadable

Per-request failures during a run are not exceptions: they are recorded on the turn record.

A user's own text files (kits, spaces, traces, histories) are read through `read_text`, so a
file that is not UTF-8 is one error naming the file, the line and the byte, not a codec's
traceback.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

if TYPE_CHECKING:  # only for the hints: `kit --help` loads no pydantic
    from pydantic import BaseModel, ValidationError

__all__ = [
    "RunFileError",
    "StallkitError",
    "closest_key",
    "failure_words",
    "is_invalid_json",
    "is_unknown_key",
    "not_utf8",
    "read_text",
    "validation_location",
    "validation_message",
]


class StallkitError(Exception):
    """The root of the tool's own errors: a one-line message and a hint saying what to do."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class RunFileError(StallkitError):
    """A file of a run directory is missing, is not valid JSON, or does not fit its model.

    The message names the file (and the line, for JSONL files).
    """


#: what to do about a file that is not UTF-8
NOT_UTF8_HINT = "save it as UTF-8"


def not_utf8(path: Path | str, exc: UnicodeDecodeError) -> str:
    """`FILE: not UTF-8 (byte 0xE9 at offset 5, line 1)`: where a file stops being UTF-8."""
    data = bytes(exc.object)
    line = data.count(b"\n", 0, exc.start) + 1
    byte = data[exc.start : exc.start + 1].hex().upper()
    return f"{path}: not UTF-8 (byte 0x{byte} at offset {exc.start}, line {line})"


def read_text(path: Path, error: type[StallkitError] = StallkitError) -> str:
    """A user's text file, decoded as UTF-8; `error` (message and hint) when it is not UTF-8.

    An OSError (missing file, a directory, no permission) is left to the caller, which knows
    what the file was for.
    """
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        pass
    try:  # again as bytes, so that the offset counts from the file's start
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(not_utf8(path, exc), NOT_UTF8_HINT) from None
    return path.read_text(encoding="utf-8")  # the file changed between the two reads


def failure_words(doing: str, exc: BaseException) -> str:
    """A foreign exception as one line: what was being done, its type and its message, or its
    type alone where it says nothing (an HTTP library's read timeout often has an empty
    message), never a type followed by an empty colon."""
    said = " ".join(str(exc).split())
    return f"{doing}: {type(exc).__name__}" + (f": {said}" if said else "")


def _clean(err_type: str, msg: str) -> str:
    if err_type == "extra_forbidden":
        return "unknown key"
    if err_type == "json_invalid":
        return "not valid JSON"
    # pydantic prefixes the text of a ValueError raised in a validator
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def is_invalid_json(exc: ValidationError) -> bool:
    """Whether a validation error says its input was not JSON at all (`validate_json`)."""
    return exc.errors()[0]["type"] == "json_invalid"


def validation_location(exc: ValidationError) -> tuple[int | str, ...]:
    """Where the first problem of a validation error is (field path; empty: the whole model)."""
    return tuple(exc.errors()[0]["loc"])


def validation_message(
    exc: ValidationError,
    *,
    names: Mapping[str, str] | None = None,
    default: str = "config",
) -> str:
    """`where: what` for the first problem of a validation error, as one line.

    `where` is the field's dotted location. The command line passes `names`, its field ->
    flag map, so that a bad `--duration` is blamed on `--duration`, not on `duration_s`; field
    names inside the message are replaced too. A problem of the whole model (a cross-field
    check) is placed at `default`, or given as the bare message when `default` is empty.
    """
    err = exc.errors()[0]
    where = ".".join(str(part) for part in validation_location(exc)) or default
    what = _clean(err["type"], err["msg"])
    if names:
        where = names.get(where, where)
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
        what = pattern.sub(lambda m: names[m.group(1)], what)
    return f"{where}: {what}" if where else what


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """The pydantic models an annotation holds (itself, a union's, a dict's or list's values)."""
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        yield annotation
        return
    for arg in get_args(annotation):
        yield from _models_in(arg)


def _keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name, info in model.model_fields.items():
        yield prefix + name
        for inner in _models_in(info.annotation):
            yield from _keys(inner, f"{prefix}{name}.")


def is_unknown_key(exc: ValidationError) -> bool:
    """Whether the first problem is a key the model does not have (`extra="forbid"`)."""
    return bool(exc.errors()[0]["type"] == "extra_forbidden")


def closest_key(model: type[BaseModel], dotted: str) -> str | None:
    """The key of `model` (dotted, nested models included) nearest to a mistyped `dotted`
    (`load.agnets`, or `agnets` alone, both give `load.agents`); None when none is near."""
    keys = sorted(set(_keys(model)))
    found = difflib.get_close_matches(dotted, keys, n=1)
    if found:
        return found[0]
    last = dotted.rpartition(".")[2]
    by_last = {key.rpartition(".")[2]: key for key in reversed(keys)}  # the first key wins
    near = difflib.get_close_matches(last, list(by_last), n=1)
    return by_last[near[0]] if near else None
