"""Arrival processes: when an open-loop load starts its requests or its sessions.

Pure code: no I/O and no clock. A process is a rate over time (one constant rate, a linear
ramp, or stages of their own rate) and a law of the gaps between arrivals: `constant` (equal
gaps), `poisson` (exponential gaps) or `bursty` (gamma gaps of shape `burstiness`, as
`vllm bench serve --burstiness`: 1 is Poisson, lower is burstier, the mean rate the same).
Gaps of mean one are drawn in the process's own time, where the rate is 1, and mapped to run
seconds through the inverse of the cumulative rate (time rescaling), so a Poisson process
stays Poisson where the rate changes. The first arrival is at 0 s. The draws come from a
random stream of their own, seeded from the load's seed only: the arrival times never shift
the workload's sizes or texts, and every arm of an A/B sees the same times.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.time import TimeBase

__all__ = [
    "ArrivalGate",
    "Process",
    "Segment",
    "Stage",
    "Unit",
    "arrival_rng",
    "arrival_times",
    "expected_count",
    "planned_arrivals",
    "rates_in_wall",
    "segments",
    "unit_gaps",
]

#: how turns start: `closed` (agents pace themselves, the default) or an open-loop law
Process = Literal["closed", "constant", "poisson", "bursty"]
#: what an arrival starts: one request (of a free agent) or a whole new agent session
Unit = Literal["requests", "sessions"]


class Stage(BaseModel):
    """One stage of a load's rate: `rate` per second for `duration_s`, or a linear ramp from
    `rate` to `rate_end` over it."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    rate: float = Field(gt=0.0, description="Arrivals per second at the stage's start.")
    duration_s: float = Field(
        gt=0.0, description="How long the stage lasts (s).", json_schema_extra={"unit": "engine"}
    )
    rate_end: float | None = Field(
        None, gt=0.0, description="Arrivals per second at the stage's end (unset: `rate`)."
    )


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of the rate: from `rate0` to `rate1` (linearly) over `duration_s` seconds."""

    duration_s: float
    rate0: float
    rate1: float

    @property
    def mass(self) -> float:
        """Expected arrivals in the segment (infinite for an endless one)."""
        return self.duration_s * (self.rate0 + self.rate1) / 2

    def rate_at(self, t: float) -> float:
        """The rate `t` seconds into the segment."""
        if self.rate1 == self.rate0:
            return self.rate0
        return self.rate0 + (self.rate1 - self.rate0) * t / self.duration_s

    def time_of(self, mass: float) -> float:
        """Seconds into the segment where `mass` arrivals are expected (at most its mass)."""
        slope = (self.rate1 - self.rate0) / self.duration_s if self.rate1 != self.rate0 else 0.0
        if slope == 0.0:
            return mass / self.rate0
        # the root of slope/2 t^2 + rate0 t - mass, in the form that does not cancel
        return 2 * mass / (self.rate0 + math.sqrt(self.rate0**2 + 2 * slope * mass))


def segments(
    rate: float | None,
    rate_end: float | None = None,
    ramp_s: float | None = None,
    stages: Sequence[Stage] = (),
) -> list[Segment]:
    """The rate over a run: its stages (arrivals end after the last), or `rate` held, or a
    ramp from `rate` to `rate_end` over `ramp_s` seconds and then `rate_end` held."""
    if stages:
        return [Segment(s.duration_s, s.rate, s.rate_end or s.rate) for s in stages]
    assert rate is not None, "an open-loop load has a rate or stages"
    if rate_end is None or ramp_s is None:
        return [Segment(math.inf, rate, rate)]
    return [Segment(ramp_s, rate, rate_end), Segment(math.inf, rate_end, rate_end)]


def rates_in_wall(load: dict[str, Any], base: TimeBase) -> dict[str, Any]:
    """A dumped load's rates and stages, given per engine second, per wall second of `base`
    (the other durations convert by their declared unit; these are not plain durations)."""
    per_wall = 1.0 / base.to_wall(1.0)
    out = dict(load)
    for key in ("rate", "rate_end"):
        if out.get(key) is not None:
            out[key] = out[key] * per_wall
    if out.get("stages"):
        out["stages"] = [
            {
                "rate": stage["rate"] * per_wall,
                "duration_s": base.to_wall(stage["duration_s"]),
                "rate_end": None if stage.get("rate_end") is None else stage["rate_end"] * per_wall,
            }
            for stage in out["stages"]
        ]
    return out


def expected_count(rate: Sequence[Segment], end_s: float) -> float:
    """Arrivals the rate expects before `end_s`."""
    count, start_s = 0.0, 0.0
    for segment in rate:
        if start_s >= end_s:
            break
        d = min(segment.duration_s, end_s - start_s)
        count += d * (segment.rate0 + segment.rate_at(d)) / 2
        start_s += segment.duration_s
    return count


def arrival_rng(seed: int) -> random.Random:
    """The arrivals' own random source (the workload's draws are seeded apart from it)."""
    return random.Random(f"stallkit:{seed}:arrivals")


def unit_gaps(process: Process, burstiness: float, rng: random.Random) -> Iterator[float]:
    """Endless gaps of mean 1 under the law `process` (`closed` has none)."""
    if process == "closed":
        return
    while True:
        if process == "constant":
            yield 1.0
        elif process == "poisson":
            yield rng.expovariate(1.0)
        else:  # gamma of shape k and scale 1/k: mean 1, coefficient of variation 1/sqrt(k)
            yield rng.gammavariate(burstiness, 1.0 / burstiness)


def arrival_times(
    gaps: Iterator[float], rate: Sequence[Segment], end_s: float | None = None
) -> Iterator[float]:
    """Arrival times (seconds since the run start) of unit `gaps` under the rate `rate`: the
    first at 0, the last before `end_s` or the end of the last segment."""
    mass, index, start_s, done_mass = 0.0, 0, 0.0, 0.0
    while index < len(rate):
        segment = rate[index]
        if mass - done_mass >= segment.mass:  # past this segment: on to the next
            done_mass += segment.mass
            start_s += segment.duration_s
            index += 1
            continue
        t = start_s + segment.time_of(mass - done_mass)
        if end_s is not None and t >= end_s:
            return
        yield t
        mass += next(gaps)


def planned_arrivals(
    process: Process,
    burstiness: float,
    seed: int,
    rate: Sequence[Segment],
    end_s: float | None = None,
) -> Iterator[float]:
    """The arrival times a load's settings plan (endless without an end or last stage)."""
    return arrival_times(unit_gaps(process, burstiness, arrival_rng(seed)), rate, end_s)


class ArrivalGate:
    """Arrivals shared by a run's agents: each free agent claims the next one in turn.

    An agent claims an arrival when it becomes free (its reply came back, or at its start);
    it sends at that arrival, or at once when the arrival has already passed (all agents were
    busy when it came), and the request records the planned time, so its lag behind the plan
    is its start minus that. None: no arrivals are left (the last stage has ended).
    """

    def __init__(self, times: Iterator[float]) -> None:
        self._times = times
        self.claimed = 0

    def claim(self) -> float | None:
        """The next unclaimed arrival time (None: the process has ended)."""
        t = next(self._times, None)
        if t is not None:
            self.claimed += 1
        return t
