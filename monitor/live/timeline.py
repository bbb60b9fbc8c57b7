"""Append the monitor's events to `timeline.jsonl`, one flushed JSON object per line.

The line shapes are the run directory's contract (`stallkit.contract.timeline`), which the reports
replay: `event_line` builds them. Every sample is kept (a line is a few hundred bytes; an
hour at 1 s is under 2 MB), so lines stay in time order for readers. `Up` and `StallOngoing`
events are not written: the samples and the start/end lines carry them, and a failed GPU read
is left out (a gap).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic_core import to_json

from stallkit.contract.jsonl import JsonlWriter
from stallkit.contract.timeline import (
    DownLine,
    EngineView,
    GpuLine,
    SampleLine,
    StallEndedLine,
    StallStartedLine,
    StopRequestedLine,
    TimelineLine,
)
from stallkit.monitor.detect.events import (
    Down,
    GpuReading,
    MonitorEvent,
    Sample,
    StallEnded,
    StallStarted,
    StopRequested,
)
from stallkit.monitor.signals.parse import EngineMetrics

__all__ = ["TimelineWriter", "event_line", "event_record", "fast_json", "sample_line"]


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else float(round(value, digits))


def _f(value: float | None) -> float | None:
    return None if value is None else float(value)


def _i(value: int | None) -> int | None:
    return None if value is None else int(value)


def _engine_fields(m: EngineMetrics) -> dict[str, Any]:
    # each value of its field's type already (what validation would make of it), so that the
    # JSON written without the model (`fast_json`) is the model's to the byte; a page without
    # the engine's series (its core dead behind a live server) stays empty
    vllm = m.has_engine_series
    zero = 0 if vllm else None
    return {
        "running": _i(m.running or zero),
        "waiting": _i(m.waiting or zero),
        "waiting_capacity": _i(m.waiting_capacity),
        "waiting_deferred": _i(m.waiting_deferred),
        "kv_usage": _r(m.kv_usage, 4),
        "gen_tokens": _f(m.gen_tokens or (0.0 if vllm else None)),
        "prompt_tokens": _f(m.prompt_tokens),
        "preemptions": _f(m.preemptions),
        "prefix_queries": _f(m.prefix_queries),
        "prefix_hits": _f(m.prefix_hits),
        "iterations": _f(m.iterations),
        "compute_s": None if m.compute_s is None else {k: float(v) for k, v in m.compute_s.items()},
    }


def _sample_fields(sample: Sample) -> dict[str, Any]:
    """A sample line's fields but `engines`, in the model's order."""
    fields = {"t": _r(sample.t), **_engine_fields(sample.snapshot)}
    fields["gen_tok_s"] = _r(sample.gen_tok_s)
    return fields


def _gpu_util(reading: GpuReading) -> dict[str, float]:
    return {k: float(round(v, 2)) for k, v in reading.util.items()}


def sample_line(sample: Sample) -> SampleLine:
    """The `sample` line: totals, the generation rate, and per-engine views when several."""
    snap = sample.snapshot
    engines = None
    if len(snap.engines) > 1:
        engines = {k: EngineView(**_engine_fields(e)) for k, e in snap.engines.items()}
    return SampleLine(engines=engines, **_sample_fields(sample))


def fast_json(event: MonitorEvent) -> str | None:
    """The JSON text of a one-engine `sample` line or a `gpu` line, built as a dict in the
    model's field order with every value of its field's type and serialised by pydantic's
    own encoder: the model's `model_dump_json()` to the byte (a test holds them equal), at a
    fraction of the cost (a virtual arm writes two such lines per engine second). None for
    every other event (written through its model)."""
    if isinstance(event, Sample) and len(event.snapshot.engines) <= 1:
        record = {"type": "sample", **_sample_fields(event)}
    elif isinstance(event, GpuReading) and event.error is None:
        record = {"type": "gpu", "t": _r(event.t), "util": _gpu_util(event)}
    else:
        return None
    return to_json(record).decode()


def event_line(event: MonitorEvent) -> TimelineLine | None:
    """The timeline line of an event, or None for events the timeline does not keep."""
    t = round(event.t, 3)
    match event:
        case Sample():
            return sample_line(event)
        case Down():
            return DownLine(t=t, error=event.error)
        case GpuReading(error=None):
            return GpuLine(t=t, util=_gpu_util(event))
        case StallStarted():
            onset = round(event.onset, 3)
            return StallStartedLine(
                t=t,
                onset=onset,
                kind=event.kind,
                gpu_checked=event.gpu_checked,
                evidence=event.evidence,
            )
        case StallEnded():
            return StallEndedLine(
                t=t,
                onset=round(event.onset, 3),
                kind=event.kind,
                duration_s=round(event.duration_s, 3),
            )
        case StopRequested():
            return StopRequestedLine(
                t=t, onset=round(event.onset, 3), stall_s=round(event.stall_s, 3)
            )
    return None


def event_record(event: MonitorEvent) -> dict[str, Any] | None:
    """The timeline line of an event as the JSON object written, or None (see `event_line`)."""
    line = event_line(event)
    return None if line is None else line.model_dump(mode="json")


class TimelineWriter:
    """Writes events to a JSONL file as they happen (`flush_s`: see `JsonlWriter`)."""

    def __init__(self, path: Path, flush_s: float = 0.0) -> None:
        self.path = path
        self._writer = JsonlWriter(path, flush_s)

    def handle(self, event: MonitorEvent) -> None:
        """Append the event's line (if it has one) and flush it; dropped once closed."""
        text = fast_json(event)
        if text is not None:
            self._writer.write_text(text)
            return
        line = event_line(event)
        if line is not None:
            self._writer.write(line)

    def write(self, event: MonitorEvent) -> None:
        """Same as `handle` (the name a writer is expected to have)."""
        self.handle(event)

    def close(self) -> None:
        """Close the file."""
        self._writer.close()

    def __enter__(self) -> TimelineWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
