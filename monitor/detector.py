"""The stall detector: pure rules over timed samples, no clock, no I/O.

A stall: no token generated, work pending (running > 0 or waiting > 0) and every watched
GPU at or under the idle threshold, continuously for `stall_after_s`. The onset is where
the token counter last had a new value: the sample before the first quiet one (or that one
itself, if nothing was pending before it). GPU utilisation is an average over a trailing
window (`gpu_window_s`; DCGM and NVML report the last second or so), so a reading taken
within that window after the onset may still show the work done before it and is not held
against the stall; a busy (or missing) reading after it means the GPUs are computing, and
the quiet period restarts there. A stall starts at the first sample at least
`stall_after_s` after the onset and ends at the first sample where the rule no longer holds
(its duration runs from onset to that sample). Its kind is `spinning` when the scheduler's
own counters (prefix-cache queries, engine steps, the fork's compute seconds) moved after
the first quiet interval (which may hold the last steps before a freeze), else `frozen`.
For engines without a step counter (the fork's own images) a second sign of a spinning
scheduler is the engine's CPU time (`engine_cpu_s`, cumulative CPU seconds of the engine's
processes or container, given by the orchestration): a core spinning through empty steps
burns at least `spin_cpu_cores` cores, a frozen (or SIGSTOPped) one next to none.
The quiet period is measured against `stall_after_s` and `stop_after_s` on the engine's own
clock where it keeps one apart from the wall (`engine_t`: the simulator's, which falls
behind its time scale when starved of CPU, and whose lag is then no quiet period); a real
engine's clock is the wall's. Times and durations in events and verdicts stay on `t`.
Idle (nothing pending) and down (no sample) are not stalls; going down ends a stall.
Without a GPU source the rule runs on metrics alone and every verdict says
`gpu_checked=False`.
"""

from __future__ import annotations

from collections.abc import Mapping

from monitor.config import MonitorConfig
from monitor.events import (
    DetectorEvent,
    DetectorState,
    StallEnded,
    StallKind,
    StallOngoing,
    StallStarted,
    Status,
    StopRequested,
)
from monitor.parse import MetricsSnapshot
from monitor.rates import snapshot_deltas

#: CPU cores an engine must burn while quiet to count as spinning: a spinning engine core
#: takes a whole core; the HTTP server answering scrapes next to a frozen core, a few percent
SPIN_CPU_CORES = 0.5


class StallDetector:
    """Feed it `observe(t, snapshot_or_None, gpu_util)` in time order; it returns events."""

    def __init__(
        self, config: MonitorConfig, *, gpu_checked: bool, spin_cpu_cores: float = SPIN_CPU_CORES
    ) -> None:
        self._config = config
        self._gpu_checked = gpu_checked
        self._spin_cpu_cores = spin_cpu_cores
        self._prev_cpu_s: float | None = None
        self._prev: MetricsSnapshot | None = None
        self._prev_t = 0.0
        self._prev_engine_t = 0.0
        self._onset: float | None = None
        self._onset_engine_t = 0.0  # the onset on the engine's clock (`t` without one)
        self._onset_snapshot: MetricsSnapshot | None = None
        self._moved_after_onset = False
        self._stalled = False
        self._stop_sent = False
        self._down_since: float | None = None
        self._gpu_clear_from = 0.0  # GPU readings from here on must be idle
        self._state = DetectorState("starting", gpu_checked=gpu_checked)

    @property
    def state(self) -> DetectorState:
        """The current verdict, for display."""
        return self._state

    @property
    def gpu_checked(self) -> bool:
        """Whether GPU utilisation is part of the rule (False: metrics alone)."""
        return self._gpu_checked

    def _kind(self) -> StallKind:
        return "spinning" if self._moved_after_onset else "frozen"

    def _end(self, t: float) -> list[DetectorEvent]:
        events: list[DetectorEvent] = []
        if self._stalled and self._onset is not None:
            events.append(StallEnded(t, self._onset, self._kind(), t - self._onset))
        self._onset = None
        self._onset_snapshot = None
        self._moved_after_onset = False
        self._stalled = False
        self._stop_sent = False
        return events

    def _begin(self, onset: float, onset_engine_t: float, snapshot: MetricsSnapshot) -> None:
        self._onset = onset
        self._onset_engine_t = onset_engine_t
        self._onset_snapshot = snapshot
        self._gpu_clear_from = onset + self._config.gpu_window_s

    def _gpus_idle(self, gpu_util: Mapping[str, float] | None) -> bool:
        if not self._gpu_checked:
            return True
        if not gpu_util:
            return False  # no reading cannot prove the GPUs idle
        return all(u <= self._config.idle_gpu_perc for u in gpu_util.values())

    def observe(
        self,
        t: float,
        snapshot: MetricsSnapshot | None,
        gpu_util: Mapping[str, float] | None = None,
        engine_cpu_s: float | None = None,
        engine_t: float | None = None,
    ) -> list[DetectorEvent]:
        """Judge one sample taken at `t`; `snapshot=None` means the scrape failed (down).

        `engine_cpu_s`: the engine's cumulative CPU seconds at `t`, when known. `engine_t`:
        the engine's own clock at this sample, in the unit of `t` (engine seconds over the
        time scale), for an engine whose clock is not the wall's; None: it is `t`.
        """
        prev_cpu_s, self._prev_cpu_s = self._prev_cpu_s, engine_cpu_s
        if snapshot is None:
            events = self._end(t)
            # A rate across a gap in the data would blur the gap: start afresh when back.
            self._prev = None
            if self._down_since is None:
                self._down_since = t
            self._state = DetectorState(
                "down", self._down_since, t - self._down_since, gpu_checked=self._gpu_checked
            )
            return events
        self._down_since = None
        now_engine_t = t if engine_t is None else engine_t
        prev, prev_t, prev_engine_t = self._prev, self._prev_t, self._prev_engine_t
        self._prev, self._prev_t, self._prev_engine_t = snapshot, t, now_engine_t
        pending = (snapshot.running or 0) > 0 or (snapshot.waiting or 0) > 0
        if prev is None:
            self._state = DetectorState("ok" if pending else "idle", gpu_checked=self._gpu_checked)
            return []
        deltas = snapshot_deltas(prev, snapshot, t - prev_t)
        no_tokens = not deltas.gen_tokens  # None (not exported) counts as no progress
        if not (pending and no_tokens):
            events = self._end(t)
            self._state = DetectorState("ok" if pending else "idle", gpu_checked=self._gpu_checked)
            return events
        if self._onset is None:
            prev_pending = (prev.running or 0) > 0 or (prev.waiting or 0) > 0
            if prev_pending:
                self._begin(prev_t, prev_engine_t, snapshot)
            else:
                self._begin(t, now_engine_t, snapshot)
        elif deltas.scheduler_moved or self._cpu_spinning(prev_cpu_s, engine_cpu_s, t - prev_t):
            self._moved_after_onset = True
        if not self._gpus_idle(gpu_util) and t >= self._gpu_clear_from:
            # The GPUs are computing (a long prefill, say): whatever this is, not a stall yet.
            events = self._end(t)
            self._begin(t, now_engine_t, snapshot)
            self._state = DetectorState("ok", gpu_checked=self._gpu_checked)
            return events
        return self._hold(t, now_engine_t)

    def _cpu_spinning(self, before: float | None, after: float | None, dt_s: float) -> bool:
        """Whether the engine burnt at least `spin_cpu_cores` cores over the last interval."""
        if before is None or after is None or dt_s <= 0:
            return False
        return (after - before) / dt_s >= self._spin_cpu_cores

    def _hold(self, t: float, engine_t: float) -> list[DetectorEvent]:
        """Quiet with work pending at `t`: start, continue or request to stop a stall."""
        assert self._onset is not None and self._onset_snapshot is not None
        onset = self._onset
        elapsed = t - onset
        quiet = engine_t - self._onset_engine_t  # on the engine's clock: what the rule counts
        events: list[DetectorEvent] = []
        ripe = quiet >= self._config.stall_after_s and t >= self._gpu_clear_from
        if not self._stalled and ripe:
            self._stalled = True
            events.append(
                StallStarted(t, onset, self._kind(), self._gpu_checked, self._onset_snapshot)
            )
        elif self._stalled:
            events.append(StallOngoing(t, onset, self._kind(), self._gpu_checked, elapsed))
        stop_after = self._config.stop_after_s
        stop_due = stop_after is not None and quiet >= stop_after
        if self._stalled and stop_due and not self._stop_sent:
            self._stop_sent = True
            events.append(StopRequested(t, onset, elapsed))
        status: Status = "stalled" if self._stalled else "suspect"
        kind = self._kind() if self._stalled else None
        self._state = DetectorState(status, onset, elapsed, kind, self._gpu_checked)
        return events
