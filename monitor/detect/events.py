"""The typed events the monitor loop yields and its consumers (dashboard, timeline) read.

Times `t` are wall seconds since the monitor started. Detector events come from the pure
detector; the others from the scrape loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from stallkit.contract.timeline import StallEvidence, StallKind
from stallkit.monitor.signals.parse import MetricsSnapshot
from stallkit.monitor.signals.rates import Deltas

Status = Literal["starting", "ok", "idle", "suspect", "stalled", "down"]


@dataclass(frozen=True, slots=True)
class DetectorState:
    """The detector's verdict: the status, since when, and for stalls the kind."""

    status: Status
    since: float | None = None  # onset of the suspect/stalled period, or start of down
    seconds: float = 0.0  # how long the status has held, as of the last sample
    kind: StallKind | None = None
    gpu_checked: bool = False


@dataclass(frozen=True, slots=True)
class Sample:
    """A successful scrape; `deltas` is None for the first one (no rate yet)."""

    t: float
    snapshot: MetricsSnapshot
    deltas: Deltas | None

    @property
    def gen_tok_s(self) -> float:
        """Generated tokens per second since the previous sample (0 for the first)."""
        return 0.0 if self.deltas is None else self.deltas.gen_tok_s


@dataclass(frozen=True, slots=True)
class Down:
    """A scrape that failed or timed out: the engine is down (which is not a stall), unless
    `unanswered` (its connection was accepted, its page never came: a frozen engine's sign,
    which the detector judges with the work the last page showed)."""

    t: float
    error: str
    unanswered: bool = False


@dataclass(frozen=True, slots=True)
class Up:
    """The first successful scrape after one or more `Down`."""

    t: float
    down_s: float


@dataclass(frozen=True, slots=True)
class GpuReading:
    """Utilisation (%) per watched GPU, keyed by index; `error` set when the read failed."""

    t: float
    util: Mapping[str, float]
    error: str | None = None


@dataclass(frozen=True, slots=True)
class StallStarted:
    """The stall rule has held for `stall_after_s` since `onset` (the sample that began it)."""

    t: float
    onset: float
    kind: StallKind
    gpu_checked: bool
    onset_snapshot: MetricsSnapshot
    #: what the stall showed beyond its kind (None: nothing more)
    evidence: StallEvidence | None = None


@dataclass(frozen=True, slots=True)
class StallOngoing:
    """A stall still holds at `t`."""

    t: float
    onset: float
    kind: StallKind
    gpu_checked: bool
    duration_s: float


@dataclass(frozen=True, slots=True)
class StallEnded:
    """The stall rule stopped holding at `t` (work resumed, went idle, or the engine went down)."""

    t: float
    onset: float
    kind: StallKind
    duration_s: float


@dataclass(frozen=True, slots=True)
class StopRequested:
    """One stall has lasted `stop_after_s`: the run should be stopped (sent once per stall)."""

    t: float
    onset: float
    stall_s: float


@dataclass(frozen=True, slots=True)
class Verdict:
    """The detector's state after each tick (last event of a tick), for displays."""

    t: float
    state: DetectorState


DetectorEvent = StallStarted | StallOngoing | StallEnded | StopRequested
MonitorEvent = Sample | Down | Up | GpuReading | Verdict | DetectorEvent
