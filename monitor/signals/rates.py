"""Counter deltas and rates between two snapshots, robust to counter resets.

Pure. Deltas are taken per engine and then summed, so one data-parallel engine restarting
does not hide the others' progress. A counter that goes down was reset (the engine
restarted): its new value is the delta, counted from zero, so a rate is never negative and
never spikes by the size of the lost history. A counter missing on either side gives `None`.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from stallkit.monitor.signals.parse import MetricsSnapshot


def counter_delta(prev: float | None, cur: float | None) -> float | None:
    """How much a counter grew from `prev` to `cur`; a decrease is a reset from zero."""
    if prev is None or cur is None:
        return None
    if cur < prev:
        return cur
    return cur - prev


@dataclass(frozen=True, slots=True)
class Deltas:
    """What the counters did between two scrapes `dt_s` wall seconds apart."""

    dt_s: float
    gen_tokens: float | None
    prompt_tokens: float | None
    preemptions: float | None
    prefix_queries: float | None
    prefix_hits: float | None
    iterations: float | None
    compute_s: float | None
    steps: float | None = None
    forward_progress: float | None = None  # forward passes (or tokens) counted live

    def rate(self, delta: float | None) -> float | None:
        """A delta per second (None when unknown or no time passed)."""
        if delta is None or self.dt_s <= 0:
            return None
        return delta / self.dt_s

    @property
    def gen_tok_s(self) -> float:
        """Generated tokens per second (0 when the counter is not exported)."""
        return self.rate(self.gen_tokens) or 0.0

    @property
    def scheduler_moved(self) -> bool:
        """Whether any sign of a stepping scheduler moved (prefix queries, steps, compute)."""
        return any(
            d is not None and d > 0
            for d in (self.prefix_queries, self.iterations, self.compute_s, self.steps)
        )


#: The counters a `Deltas` holds, in its field order after `dt_s`.
_COUNTERS = (
    "gen_tokens",
    "prompt_tokens",
    "preemptions",
    "prefix_queries",
    "prefix_hits",
    "iterations",
    "compute_s_total",
    "steps",
    "forward_progress",
)
_read_counters = attrgetter(*_COUNTERS)


def snapshot_deltas(prev: MetricsSnapshot, cur: MetricsSnapshot, dt_s: float) -> Deltas:
    """Counter deltas from `prev` to `cur`, summed over engines.

    An engine seen for the first time has no baseline: it is skipped rather than spike.
    """
    totals: list[float | None] = [None] * len(_COUNTERS)
    for key, engine in cur.engines.items():
        before = prev.engines.get(key)
        if before is None:
            continue
        for i, (was, now) in enumerate(
            zip(_read_counters(before), _read_counters(engine), strict=True)
        ):
            delta = counter_delta(was, now)
            if delta is not None:
                total = totals[i]
                totals[i] = delta if total is None else total + delta
    return Deltas(dt_s, *totals)
