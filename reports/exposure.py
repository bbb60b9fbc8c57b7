"""How long an arm was observed under load, and whether its observation was censored.

A seed's exposure is the engine time during which the monitor saw the engine under load and
its metrics answering: from the first sample until the first stall's onset, or until the arm
ended. A stretch from a `down` line to the next sample is not observed, nor is anything after
an early end. A seed that ended early without a stall (its engine died, it was interrupted
or failed, or its metrics were still down at the end) is censored: its exposure counts, but
it never reads as "did not stall" over its planned length. Pure functions over timeline lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contract.ab import Censor
from contract.meta import EndReason
from contract.timeline import DownLine, SampleLine, TimelineLine

__all__ = ["Observation", "observe"]


@dataclass(frozen=True)
class Observation:
    """One seed's exposure (engine seconds) and why it was censored, if it was."""

    exposure_s: float
    censored: Censor | None


def observe(
    events: Sequence[TimelineLine],
    scale: float,
    end_s: float,
    first_onset_s: float | None,
    end_reason: EndReason,
) -> Observation:
    """The observation of one arm directory's seed.

    `events` are its timeline lines (times on the arm's clock, times `scale` gives engine
    seconds); `end_s` is when the arm ended and `first_onset_s` its first stall's onset, both
    engine seconds since the monitor started.
    """
    limit = end_s if first_onset_s is None else min(first_onset_s, end_s)
    exposure = 0.0
    up_since: float | None = None
    for ev in sorted(events, key=lambda e: e.t):
        t = min(ev.t * scale, limit)
        seen = isinstance(ev, SampleLine) and ev.has_engine_series
        blank = isinstance(ev, SampleLine) and not ev.has_engine_series
        if seen and up_since is None:
            up_since = t
        elif (isinstance(ev, DownLine) or blank) and up_since is not None:
            # a page without the engine's series observes no load, as a failed scrape
            exposure += t - up_since
            up_since = None
    down_at_end = up_since is None
    if up_since is not None:
        exposure += max(0.0, limit - up_since)
    return Observation(
        round(max(0.0, exposure), 3), _censor(first_onset_s, end_reason, down_at_end)
    )


def _censor(first_onset_s: float | None, end_reason: EndReason, down_at_end: bool) -> Censor | None:
    if first_onset_s is not None:
        return None  # the event was observed: a stall is a stall however the run then ended
    if end_reason != "duration":
        return end_reason
    return "metrics_down" if down_at_end else None
