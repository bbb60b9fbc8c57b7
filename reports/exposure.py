"""How long an arm was observed under load, and whether its observation was censored.

A seed's exposure is the engine time during which work was pending and the monitor could see
the engine: from the first sample until the first stall's onset, or until the arm ended,
counting only the stretches where

- the engine's metrics answered (a stretch from a `down` line, or a page without the engine's
  series, to the next good sample is not observed), and
- work was pending: the last sample showed requests running or waiting on the engine, or the
  agents had a request in flight (stallkit's own runs know what they sent).

Idle time is not exposure: an engine sitting idle after a trace has ended cannot stall, so
counting it would make a fix look safer than it was shown to be. A seed that ended early
without a stall (its engine died, it was interrupted or failed, or its metrics were still down
at the end) is censored: its exposure counts, but it never reads as "did not stall" over its
planned length. Pure functions over timeline lines and request intervals.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stallkit.contract.ab import Censor
from stallkit.contract.meta import EndReason
from stallkit.contract.timeline import DownLine, SampleLine, TimelineLine

__all__ = ["Interval", "Observation", "loaded_s", "observe", "pending_intervals"]

#: a stretch of time [start, end), on the arm's clock or in engine seconds
Interval = tuple[float, float]


@dataclass(frozen=True)
class Observation:
    """One seed's exposure (engine seconds) and why it was censored, if it was."""

    exposure_s: float
    censored: Censor | None


def _union(spans: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time as `spans` (empty ones dropped)."""
    out: list[Interval] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _overlap(a: Sequence[Interval], b: Sequence[Interval]) -> float:
    """Total length of the intersection of two sorted disjoint interval lists."""
    return sum(high - low for low, high in _intersect(a, b))


def _pending(sample: SampleLine) -> bool:
    return (sample.running or 0) > 0 or (sample.waiting or 0) > 0


def pending_intervals(
    events: Sequence[TimelineLine], in_flight: Iterable[Interval], end: float
) -> list[Interval]:
    """When work was pending, on the arm's clock: from each sample that showed requests running
    or waiting to the next line (or `end`), and every request's own flight."""
    spans = list(in_flight)
    lines = sorted((e for e in events if isinstance(e, SampleLine | DownLine)), key=lambda e: e.t)
    for i, ev in enumerate(lines):
        if isinstance(ev, SampleLine) and _pending(ev):
            spans.append((ev.t, lines[i + 1].t if i + 1 < len(lines) else end))
    return _union(spans)


def _observed_intervals(events: Sequence[TimelineLine], end: float) -> tuple[list[Interval], bool]:
    """When the engine's metrics answered with its series, and whether they were down at the
    end (a page without the engine's series observes no load, as a failed scrape)."""
    spans: list[Interval] = []
    up_since: float | None = None
    for ev in sorted(events, key=lambda e: e.t):
        seen = isinstance(ev, SampleLine) and ev.has_engine_series
        blank = isinstance(ev, SampleLine) and not ev.has_engine_series
        if seen and up_since is None:
            up_since = ev.t
        elif (isinstance(ev, DownLine) or blank) and up_since is not None:
            spans.append((up_since, ev.t))
            up_since = None
    if up_since is not None:
        spans.append((up_since, max(up_since, end)))
    return spans, up_since is None


def observe(
    events: Sequence[TimelineLine],
    scale: float,
    end_s: float,
    first_onset_s: float | None,
    end_reason: EndReason,
    in_flight: Iterable[Interval] = (),
) -> Observation:
    """The observation of one arm directory's seed.

    `events` are its timeline lines (times on the arm's clock, times `scale` gives engine
    seconds); `in_flight` the agents' requests, each (sent, ended) on the same clock; `end_s`
    is when the arm ended and `first_onset_s` its first stall's onset, both engine seconds
    since the monitor started.
    """
    limit = end_s if first_onset_s is None else min(first_onset_s, end_s)
    end = end_s / scale if scale > 0 else end_s
    observed, down_at_end = _observed_intervals(events, end)
    pending = pending_intervals(events, in_flight, end)
    window = [(0.0, limit / scale if scale > 0 else limit)]
    exposure = _overlap(_intersect(_union(observed), pending), window) * scale
    return Observation(
        round(max(0.0, exposure), 3), _censor(first_onset_s, end_reason, down_at_end)
    )


def _intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """The intersection of two sorted disjoint interval lists, as one."""
    out: list[Interval] = []
    i, j = 0, 0
    while i < len(a) and j < len(b):
        low, high = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if high > low:
            out.append((low, high))
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return out


def loaded_s(
    events: Sequence[TimelineLine], scale: float, end_s: float, in_flight: Iterable[Interval] = ()
) -> float:
    """Engine seconds with work pending over the whole run (stalls included, idle time not):
    the time rates such as decode tok/s are averaged over."""
    end = end_s / scale if scale > 0 else end_s
    pending = pending_intervals(events, in_flight, end)
    return round(_overlap(pending, [(0.0, end)]) * scale, 3)


def _censor(first_onset_s: float | None, end_reason: EndReason, down_at_end: bool) -> Censor | None:
    if first_onset_s is not None:
        return None  # the event was observed: a stall is a stall however the run then ended
    if end_reason != "duration":
        return end_reason
    return "metrics_down" if down_at_end else None
