"""Append the monitor's events to `timeline.jsonl`, one flushed JSON object per line.

The line shapes are the run-directory contract that reports replay (see `event_record`).
Every sample is kept (a line is a few hundred bytes; an hour at 1 s is under 2 MB), so
lines stay in time order for readers. `Up` and `StallOngoing` events are not written: the
samples and the start/end lines carry them, and a failed GPU read is left out (a gap).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from monitor.events import (
    Down,
    GpuReading,
    MonitorEvent,
    Sample,
    StallEnded,
    StallStarted,
    StopRequested,
)
from monitor.parse import EngineMetrics


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _engine_fields(m: EngineMetrics) -> dict[str, Any]:
    return {
        "running": m.running or 0,
        "waiting": m.waiting or 0,
        "waiting_capacity": m.waiting_capacity,
        "waiting_deferred": m.waiting_deferred,
        "kv_usage": _r(m.kv_usage, 4),
        "gen_tokens": m.gen_tokens or 0.0,
        "prompt_tokens": m.prompt_tokens,
        "preemptions": m.preemptions,
        "prefix_queries": m.prefix_queries,
        "prefix_hits": m.prefix_hits,
        "iterations": m.iterations,
        "compute_s": None if m.compute_s is None else dict(m.compute_s),
    }


def sample_record(sample: Sample) -> dict[str, Any]:
    """The `sample` line: totals, the generation rate, and per-engine views when several."""
    snap = sample.snapshot
    record: dict[str, Any] = {"type": "sample", "t": round(sample.t, 3)}
    record.update(_engine_fields(snap))
    record["gen_tok_s"] = round(sample.gen_tok_s, 3)
    if len(snap.engines) > 1:
        record["engines"] = {k: _engine_fields(e) for k, e in snap.engines.items()}
    return record


def event_record(event: MonitorEvent) -> dict[str, Any] | None:
    """The timeline line of an event, or None for events the timeline does not keep."""
    t = round(event.t, 3)
    match event:
        case Sample():
            return sample_record(event)
        case Down():
            return {"type": "down", "t": t, "error": event.error}
        case GpuReading(util=util, error=None):
            return {"type": "gpu", "t": t, "util": {k: round(v, 2) for k, v in util.items()}}
        case StallStarted():
            return {
                "type": "stall_started",
                "t": t,
                "onset": round(event.onset, 3),
                "kind": event.kind,
                "gpu_checked": event.gpu_checked,
            }
        case StallEnded():
            return {
                "type": "stall_ended",
                "t": t,
                "onset": round(event.onset, 3),
                "kind": event.kind,
                "duration_s": round(event.duration_s, 3),
            }
        case StopRequested():
            return {
                "type": "stop_requested",
                "t": t,
                "onset": round(event.onset, 3),
                "stall_s": round(event.stall_s, 3),
            }
    return None


class TimelineWriter:
    """Writes events to a JSONL file as they happen; use as a context manager."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def handle(self, event: MonitorEvent) -> None:
        """Append the event's line (if it has one) and flush it."""
        record = event_record(event)
        if record is not None and not self._file.closed:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()

    def write(self, event: MonitorEvent) -> None:
        """Same as `handle` (the name a writer is expected to have)."""
        self.handle(event)

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def __enter__(self) -> TimelineWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
