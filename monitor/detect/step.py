"""The monitor's step: what one tick's readings mean, as typed events. Pure: no I/O, no clock.

`MonitorStep.events(t, snapshot, util, ...)` takes what a tick read (a metrics snapshot, or
None with the error when the scrape failed; the GPUs' utilisation, or None with its error; the
engine's cumulative CPU seconds) at time `t`, and returns the events in the order consumers
expect: the GPU reading, `Down`/`Up`, the `Sample` with its rates, the detector's events, and
the `Verdict`. Every source calls it: one engine watched over HTTP (`stallkit.monitor.live.watch`)
with what it scraped, each engine of a fleet (`stallkit.monitor.fleet.bank`) with what
Prometheus answered, and the virtual clock with the sample it builds from the engine core's
counters, so every source and both clocks judge stalls by one piece of code.

A simulator states its own engine clock on its page, which falls behind its time scale when
it is starved of CPU: the detector measures quiet periods on that clock (in the unit of `t`,
engine seconds over the scale), so a lagging simulator is not read as a stall; a real
engine's clock, and the virtual clock's (whose `t` is engine time already), is `t` itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from stallkit.contract.time import TimeBase
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.detector import StallDetector
from stallkit.monitor.detect.events import Down, GpuReading, MonitorEvent, Sample, Up, Verdict
from stallkit.monitor.signals.activity import GpuActivity
from stallkit.monitor.signals.parse import MetricsSnapshot
from stallkit.monitor.signals.rates import Deltas, snapshot_deltas

__all__ = ["MonitorStep"]


class MonitorStep:
    """One monitored engine's state between ticks: the detector, the last sample, down/up."""

    def __init__(self, config: MonitorConfig, gpu_checked: bool) -> None:
        self.detector = StallDetector(config, gpu_checked=gpu_checked)
        self.gpu_checked = gpu_checked
        self._prev: tuple[float, MetricsSnapshot] | None = None
        self._down_since: float | None = None
        # the simulator's clock at the first sample that stated it: (engine seconds, its t)
        self._sim_origin: tuple[float, float] | None = None

    def engine_t(self, t: float, snapshot: MetricsSnapshot) -> float | None:
        """The engine's own clock at this sample, in the unit of `t` (None: `t` itself).

        The simulator's engine seconds since the first sample that stated them, converted
        with its time scale, counted from that sample's `t`. Only differences matter: a
        restarted simulator's clock starts again, after the failed scrapes that reset the
        detector.
        """
        clock = snapshot.sim_clock
        if clock is None:
            return None
        if self._sim_origin is None:
            self._sim_origin = (clock.engine_s, t)
        origin_s, origin_t = self._sim_origin
        return origin_t + TimeBase(clock.scale).to_wall(clock.engine_s - origin_s)

    def events(
        self,
        t: float,
        snapshot: MetricsSnapshot | None,
        util: Mapping[str, float] | None,
        *,
        error: str | None = None,
        gpu_error: str | None = None,
        engine_cpu_s: float | None = None,
        client_pending: int = 0,
        activity: GpuActivity | None = None,
        unanswered: bool = False,
    ) -> list[MonitorEvent]:
        """The events of one tick at `t`; `snapshot=None` is a failed scrape (`error` says why;
        `unanswered`: its connection was accepted and the page never came, a frozen engine's
        sign rather than a gone one's).

        `client_pending`: requests the run's clients have sent and still wait on (pending work
        whatever the engine's gauges read; 0 without clients). `activity`: the GPUs' power
        draw and SM activity read with `util`, where the source gives them."""
        out: list[MonitorEvent] = []
        known: tuple[MetricsSnapshot, Deltas] | None = None
        if self.gpu_checked:
            out.append(GpuReading(t, util or {}, gpu_error))
        if snapshot is None:
            out.append(Down(t, error or "unknown error", unanswered))
            self._prev = None
            if self._down_since is None:
                self._down_since = t
        else:
            if self._down_since is not None:
                out.append(Up(t, t - self._down_since))
                self._down_since = None
            deltas = None
            if self._prev is not None:
                deltas = snapshot_deltas(self._prev[1], snapshot, t - self._prev[0])
                known = (self._prev[1], deltas)
            out.append(Sample(t, snapshot, deltas))
            self._prev = (t, snapshot)
        engine_t = None if snapshot is None else self.engine_t(t, snapshot)
        out.extend(
            self.detector.observe(
                t,
                snapshot,
                util,
                engine_cpu_s,
                engine_t,
                known,
                client_pending=client_pending,
                activity=activity,
                page_unanswered=unanswered,
            )
        )
        out.append(Verdict(t, self.detector.state))
        return out
