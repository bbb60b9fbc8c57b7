"""A trace's window, as AIPerf's fixed schedule cuts one: which lines a replay keeps, and when.

A line's arrival is fixed by the trace where it gives a timestamp, for a session's first line
(its delay counts from the start) and for a line without a session (after the previous such
line); a later turn timed by a delay waits on the engine, so it goes with the turn before it.
The window keeps the lines whose arrival is in it (both ends kept, as AIPerf's
`--fixed-schedule-start-offset` and `--fixed-schedule-end-offset`), and the run starts at the
window's start, or with auto offset (`--fixed-schedule-auto-offset`) at its first request, as
AIPerf's schedule does. A session cut by the window starts at its first kept turn. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from stallkit.contract.trace import MooncakeLine, SessionCall, Trace, TraceError

__all__ = ["Window", "arrivals_ms", "span_s", "windowed"]


def _lines(trace: Trace) -> Sequence[tuple[int, MooncakeLine | SessionCall]]:
    return trace.sessions if trace.format == "sessions" else trace.mooncake


def span_s(trace: Trace) -> float:
    """Seconds from the first to the last arrival the trace fixes (0 when it fixes none)."""
    known = [at for at in arrivals_ms(trace) if at is not None]
    return (max(known) - min(known)) / 1000 if known else 0.0


def arrivals_ms(trace: Trace) -> list[float | None]:
    """Each line's arrival in trace ms where the trace fixes it: its timestamp; a session's
    first line's delay (from the start); a line without a session, the previous such line's
    arrival plus its delay. None for a later turn timed by a delay (it waits on the engine)."""
    out: list[float | None] = []
    started: set[str] = set()
    alone = 0.0
    for _, x in _lines(trace):
        if x.session_id is None:
            alone = x.timestamp if x.timestamp is not None else alone + (x.delay or 0)
            out.append(alone)
        elif x.session_id not in started:
            started.add(x.session_id)
            out.append(x.timestamp if x.timestamp is not None else (x.delay or 0))
        else:
            out.append(x.timestamp)
    return out


@dataclass(frozen=True, slots=True)
class Window:
    """AIPerf's fixed-schedule window: offsets in trace ms (both ends kept), and whether the
    run starts at the first request in it."""

    start_ms: int | None = None
    end_ms: int | None = None
    auto_offset: bool = False

    def holds(self, at_ms: float) -> bool:
        """Whether an arrival at `at_ms` is in the window."""
        return (self.start_ms is None or at_ms >= self.start_ms) and (
            self.end_ms is None or at_ms <= self.end_ms
        )


def windowed(trace: Trace, window: Window) -> tuple[Trace, float]:
    """The lines of `trace` in `window`, their arrivals counted from the run's start; and the
    trace millisecond that start is (the first request's with auto offset, else the window's
    start, else 0). A TraceError when the window holds no request."""
    if window == Window():
        return trace, 0.0
    arrivals = arrivals_ms(trace)
    followed: dict[str, bool] = {}  # each session's last line: kept or not
    keep: list[bool] = []
    for (_, x), at in zip(_lines(trace), arrivals, strict=True):
        kept = window.holds(at) if at is not None else followed.get(x.session_id or "", False)
        if x.session_id is not None:
            followed[x.session_id] = kept
        keep.append(kept)
    known = [at for at, k in zip(arrivals, keep, strict=True) if k and at is not None]
    if not known:
        raise TraceError(_empty_window(trace, window, arrivals), _WINDOW_HINT)
    zero = min(known) if window.auto_offset else float(window.start_ms or 0)

    def moved(x: _Line, at: float | None) -> _Line:
        return x if at is None else x.model_copy(update={"timestamp": at - zero, "delay": None})

    lines = [
        (n, moved(x, at)) for (n, x), at, k in zip(_lines(trace), arrivals, keep, strict=True) if k
    ]
    calls = [(n, x) for n, x in lines if isinstance(x, SessionCall)]
    requests = [(n, x) for n, x in lines if isinstance(x, MooncakeLine)]
    return replace(trace, sessions=calls, mooncake=requests), zero


_Line = MooncakeLine | SessionCall
_WINDOW_HINT = (
    "move --fixed-schedule-start-offset / --fixed-schedule-end-offset (a kit's "
    "load.trace_start_offset_ms / load.trace_end_offset_ms) into that range"
)


def _empty_window(trace: Trace, window: Window, arrivals: list[float | None]) -> str:
    known = [at for at in arrivals if at is not None]
    if window.end_ms is None:
        span = f"from {window.start_ms} ms on"
    elif window.start_ms is None:
        span = f"up to {window.end_ms} ms"
    else:
        span = f"{window.start_ms} to {window.end_ms} ms"
    return (
        f"the window {span} holds none of the {len(trace)} requests of trace {trace.path}: "
        f"their arrivals run from {min(known):g} to {max(known):g} ms"
    )
