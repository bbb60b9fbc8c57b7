"""The stall detector: pure rules over timed samples, no clock, no I/O.

A stall: work pending (running > 0 or waiting > 0) and no progress, continuously for
`stall_after_s`. Progress between two samples is a generated token, or prompt tokens
counted while nothing was preempted (a prefill that moved forward without throwing work
away). The onset is where progress was last seen: the sample before the first quiet one (or
that one itself, if nothing was pending before it). A stall starts at the first sample at
least `stall_after_s` after the onset and ends at the first sample with progress, no work,
or no answer (its duration runs from onset to that sample). Busy GPUs do not clear a stall:
GPU utilisation and the engine's CPU are evidence for its kind, never a gate.

Its kind is judged when it starts, from what the quiet period showed, by the first row of
`SIGNATURES` that matches (each kind's signature is written once, there):

| kind | signature while quiet with work pending |
| --- | --- |
| `dead_core` | the page answers but the engine's `vllm:` series are gone |
| `thrashing` | preemptions climb (requests thrown back and re-prefilled) |
| `blocked` | the scheduler steps, with nothing running and requests waiting |
| `busy_hang` | the GPUs are busy and the scheduler does not step |
| `spinning` | the scheduler steps (its counters or the engine's CPU move) |
| `frozen` | nothing moves |

A core that does not step is never `blocked`, whatever its gauges say: a stopped process
(SIGSTOP, a hung core) keeps the gauges of its last step, which may read nothing running and
requests waiting. `blocked` is a live core that steps over a request it cannot admit.

The scheduler "steps" when its own counters (prefix-cache queries, engine steps, the fork's
compute seconds) move after the first quiet interval (which may hold the last steps before
a freeze), or, for engines without a step counter, when the engine's CPU time
(`engine_cpu_s`, cumulative CPU seconds of its processes, given by the orchestration) grows
by at least `spin_cpu_cores` cores: a core spinning through empty steps burns a whole core,
a frozen one next to none. GPU utilisation averages a trailing window (`gpu_window_s`), so
readings within that window after the onset may still show earlier work and are not
evidence; a GPU over `idle_gpu_perc` in the latest reading after it is busy.

The quiet period is measured against `stall_after_s` and `stop_after_s` on the engine's own
clock where it keeps one apart from the wall (`engine_t`: the simulator's, which falls
behind its time scale when starved of CPU, and whose lag is then no quiet period), and never
longer than on the wall: a lagging simulator whose core stops (a freeze) has nothing left to
step and catches up with the wall at once, and that leap of its clock is its lag, no quiet
period either. A real engine's clock is the wall's. Times and durations in events and
verdicts stay on `t`.
Idle (nothing pending) and down (no answer) are not stalls; going down ends a stall.

Work pending also counts what the clients wait on, where the caller knows it
(`client_pending`: stallkit's own agents count the requests they sent and still wait on): a
wedged engine whose gauges read nothing running and nothing waiting is still stalled when
those requests go unanswered for `stall_after_s`. Such a stall is named by its kind as any
other, with the evidence that its gauges hid it (`StallEvidence.client_waiting`). A monitor
without the clients (`kit monitor` alone) reads such an engine as idle. For the same reason a
page that does not answer while the clients wait on requests is not `down` but quiet with
work pending (a SIGSTOPped llama.cpp server stops its HTTP threads with it): an engine that is
gone fails its clients' requests too (connections closed or refused), and then nobody waits;
one that answers neither its clients nor its page for `stall_after_s` is stalled, and the
evidence says the page went unanswered (`StallEvidence.page_unanswered`). Without the
clients, the scrape itself tells the two apart: a process frozen whole still has its
connections accepted (the kernel's listen backlog) and never answers, a dead one refuses
them. A page unanswered on an accepted connection (`page_unanswered`) after a page that
showed work pending is quiet with that work pending, as above, and its evidence says so
(`StallEvidence.connections_accepted`); a refused connection is down.
Where the GPU source gives SM activity (DCGM's), SMs idle on every GPU (`SM_IDLE_FRACTION`)
overrule a utilisation gauge that reads busy: a GPU busy at idle SMs is not computing, and
the stall is `frozen`, not `busy_hang`. Power draw and SM activity past the window are in
the stall's evidence (`StallEvidence`). Without a GPU source the rule runs on metrics alone and every verdict says
`gpu_checked=False` (a busy hang then reads as frozen). An engine that shows no sign of
stepping (no moving counter, its CPU not given) reads as frozen rather than blocked or
spinning: what cannot be seen to move is not claimed to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from stallkit.contract.timeline import StallEvidence, StallKind
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import (
    DetectorEvent,
    DetectorState,
    StallEnded,
    StallOngoing,
    StallStarted,
    Status,
    StopRequested,
)
from stallkit.monitor.signals.activity import GpuActivity
from stallkit.monitor.signals.parse import MetricsSnapshot
from stallkit.monitor.signals.rates import Deltas, snapshot_deltas

#: Seconds a page without the engine's series still counts as a dead core after the engine
#: was last seen with work (the requests it held are gone from the page with the series)
DEAD_CORE_MEMORY_S = 3600.0
#: CPU cores an engine must burn while quiet to count as spinning: a spinning engine core
#: takes a whole core; the HTTP server answering scrapes next to a frozen core, a few percent
SPIN_CPU_CORES = 0.5


@dataclass(slots=True)
class Evidence:
    """What a quiet period has shown since its onset: the inputs of its kind."""

    core_gone: bool = False  # the latest page answered without the engine's series
    preempted: bool = False  # preemptions moved while quiet (or within stall_after before)
    blocked: bool = False  # the latest sample's gauges: nothing running, requests waiting
    gpu_busy: bool = False  # the latest GPU reading past the window was over the idle mark
    stepped: bool = False  # scheduler counters or the engine's CPU moved after the first interval
    hidden: int = 0  # the latest sample's gauges read idle while this many waited on clients
    unanswered: bool = False  # the page stopped answering with work pending
    accepted: bool = False  # ... on connections the engine's port accepted
    activity: GpuActivity | None = None  # power and SM activity, the latest past the window


#: Each kind's signature, checked in order; the first that holds names the stall.
SIGNATURES: tuple[tuple[StallKind, Callable[[Evidence], bool]], ...] = (
    ("dead_core", lambda e: e.core_gone),
    ("thrashing", lambda e: e.preempted),
    ("blocked", lambda e: e.blocked and e.stepped),  # stale gauges of a stopped core: frozen
    ("busy_hang", lambda e: e.gpu_busy and not e.stepped),
    ("spinning", lambda e: e.stepped),
    ("frozen", lambda e: True),
)


def _said(found: Evidence) -> StallEvidence | None:
    """What a stall's evidence shows beyond its kind (None: nothing)."""
    gpu = found.activity
    if not found.hidden and not gpu and not found.unanswered:
        return None
    return StallEvidence(
        client_waiting=found.hidden or None,
        page_unanswered=found.unanswered or None,
        connections_accepted=found.accepted or None,
        power_w=dict(gpu.power_w) or None if gpu else None,
        sm_active=dict(gpu.sm_active) or None if gpu else None,
    )


def classify(evidence: Evidence) -> StallKind:
    """The kind a quiet period's evidence names (`SIGNATURES`, first match)."""
    return next(kind for kind, holds in SIGNATURES if holds(evidence))


def pending(snapshot: MetricsSnapshot) -> bool:
    """Whether the engine holds work (running or waiting requests)."""
    return (snapshot.running or 0) > 0 or (snapshot.waiting or 0) > 0


def progressed(deltas: Deltas, recently_preempted: bool) -> bool:
    """A token came out (or a forward pass, where the engine counts those live), or prompt
    tokens were counted with nothing preempted lately (a re-prefill of work thrown away is
    no progress, however many scrapes it spans)."""
    if deltas.gen_tokens or deltas.forward_progress:
        return True
    return bool(deltas.prompt_tokens) and not deltas.preemptions and not recently_preempted


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
        self._prev_client = 0  # what the clients waited on at the previous sample
        self._onset: float | None = None
        self._onset_engine_t = 0.0  # the onset on the engine's clock (`t` without one)
        self._onset_snapshot: MetricsSnapshot | None = None
        self._evidence = Evidence()
        self._kind: StallKind | None = None  # judged when the stall starts
        self._stop_sent = False
        self._down_since: float | None = None
        self._work_seen_t: float | None = None  # the last sample with work pending
        self._preempted_engine_t: float | None = None  # the last sample with a preemption
        self._state = DetectorState("starting", gpu_checked=gpu_checked)

    @property
    def state(self) -> DetectorState:
        """The current verdict, for display."""
        return self._state

    @property
    def gpu_checked(self) -> bool:
        """Whether GPU readings are evidence (False: metrics alone)."""
        return self._gpu_checked

    def _end(self, t: float) -> list[DetectorEvent]:
        if self._onset is None and self._kind is None:
            return []  # nothing to end: the evidence is only gathered from an onset on
        events: list[DetectorEvent] = []
        if self._kind is not None and self._onset is not None:
            events.append(StallEnded(t, self._onset, self._kind, t - self._onset))
        self._onset = None
        self._onset_snapshot = None
        self._evidence = Evidence()
        self._kind = None
        self._stop_sent = False
        return events

    def _begin(self, onset: float, onset_engine_t: float, snapshot: MetricsSnapshot) -> None:
        self._onset = onset
        self._onset_engine_t = onset_engine_t
        self._onset_snapshot = snapshot

    def _not_stalled(self, t: float, status: Status) -> list[DetectorEvent]:
        events = self._end(t)
        state = self._state
        # an unchanged not-stalled verdict keeps its state object (one tick after another)
        if state.status != status or state.since is not None:
            self._state = DetectorState(status, gpu_checked=self._gpu_checked)
        return events

    def observe(
        self,
        t: float,
        snapshot: MetricsSnapshot | None,
        gpu_util: Mapping[str, float] | None = None,
        engine_cpu_s: float | None = None,
        engine_t: float | None = None,
        known: tuple[MetricsSnapshot, Deltas] | None = None,
        client_pending: int = 0,
        activity: GpuActivity | None = None,
        page_unanswered: bool = False,
    ) -> list[DetectorEvent]:
        """Judge one sample taken at `t`; `snapshot=None` means the scrape failed (down, or
        with `page_unanswered`, a connection accepted and the page not answered: frozen
        evidence when the last page showed work pending).

        `engine_cpu_s`: the engine's cumulative CPU seconds at `t`, when known. `engine_t`:
        the engine's own clock at this sample, in the unit of `t` (engine seconds over the
        time scale), for an engine whose clock is not the wall's; None: it is `t`. `known`:
        the caller's deltas to this sample and the snapshot they start from, used when that
        is the detector's own previous sample (the monitor's step computes them anyway).
        `client_pending`: requests the clients have sent and still wait on, where the caller
        knows (pending work whatever the gauges read). `activity`: the GPUs' power draw and SM
        activity with `gpu_util`, where the source gives them.
        """
        prev_cpu_s, self._prev_cpu_s = self._prev_cpu_s, engine_cpu_s
        if snapshot is None:
            if client_pending > 0 or (page_unanswered and self._work_unanswered()):
                return self._unanswered(t, client_pending, accepted=page_unanswered)
            return self._went_down(t)
        self._down_since = None
        now_engine_t = t if engine_t is None else engine_t
        prev, prev_t, prev_engine_t = self._prev, self._prev_t, self._prev_engine_t
        if not snapshot.has_engine_series:
            return self._blank_page(t, now_engine_t)
        self._prev, self._prev_t, self._prev_engine_t = snapshot, t, now_engine_t
        prev_client, self._prev_client = self._prev_client, client_pending
        if pending(snapshot):
            self._work_seen_t = t
        busy = pending(snapshot) or client_pending > 0
        if prev is None:
            return self._not_stalled(t, "ok" if busy else "idle")
        if known is not None and known[0] is prev:
            deltas = known[1]
        else:
            deltas = snapshot_deltas(prev, snapshot, t - prev_t)
        if deltas.preemptions:
            self._preempted_engine_t = now_engine_t
        last = self._preempted_engine_t
        recently = last is not None and now_engine_t - last < self._config.stall_after_s
        if not busy or progressed(deltas, recently):
            return self._not_stalled(t, "ok" if busy else "idle")
        evidence = self._evidence
        if self._onset is None:
            was_pending = pending(prev) or prev_client > 0
            onset_t, onset_engine_t = (prev_t, prev_engine_t) if was_pending else (t, now_engine_t)
            self._begin(onset_t, onset_engine_t, snapshot)
        elif deltas.scheduler_moved or self._cpu_spinning(prev_cpu_s, engine_cpu_s, t - prev_t):
            evidence.stepped = True
        evidence.preempted = evidence.preempted or bool(deltas.preemptions)
        evidence.blocked = (snapshot.running or 0) == 0 and (snapshot.waiting or 0) > 0
        evidence.core_gone = False
        evidence.hidden = 0 if pending(snapshot) else client_pending
        assert self._onset is not None
        if gpu_util and self._gpu_checked and t >= self._onset + self._config.gpu_window_s:
            # the latest reading decides; a missing one changes nothing
            evidence.gpu_busy = any(u > self._config.idle_gpu_perc for u in gpu_util.values())
            if activity:  # idle SMs overrule a gauge that reads busy (see the module's text)
                evidence.activity = activity
                evidence.gpu_busy = evidence.gpu_busy and not activity.sms_idle
        return self._hold(t, now_engine_t)

    def _blank_page(self, t: float, engine_t: float) -> list[DetectorEvent]:
        """The server answers without the engine's series: a dead core if it had work lately
        (the work it held is gone from the page with them), else nothing to judge."""
        seen = self._work_seen_t
        if seen is None or t - seen > DEAD_CORE_MEMORY_S:
            return self._not_stalled(t, "idle")
        if self._onset is None:
            prev = self._prev
            if prev is not None and pending(prev):  # quiet since the last sample with work
                self._begin(self._prev_t, self._prev_engine_t, prev)
            else:
                self._begin(t, engine_t, prev or MetricsSnapshot())
        # no rate across the blank pages: start afresh when the series come back
        self._prev = None
        self._evidence.core_gone = True
        return self._hold(t, engine_t)

    def _work_unanswered(self) -> bool:
        """Whether the last page that answered showed work pending (or the clients'), so that
        a page now unanswered on an accepted connection leaves that work pending."""
        prev = self._prev
        return prev is not None and (pending(prev) or self._prev_client > 0)

    def _unanswered(self, t: float, waiting: int, *, accepted: bool) -> list[DetectorEvent]:
        """No page while the clients wait on `waiting` requests, or while the port accepts
        connections after a page with work (`accepted`): quiet with work pending (see the
        module's text), judged on what was seen before; when the page answers again its
        counters are compared with the last page's, so a token since then ends the stall."""
        self._down_since = None
        engine_t = self._prev_engine_t + (t - self._prev_t)  # the engine's clock, carried on
        if self._onset is None:
            prev = self._prev
            if prev is not None and (pending(prev) or self._prev_client > 0):
                self._begin(self._prev_t, self._prev_engine_t, prev)
            else:
                self._begin(t, engine_t, prev or MetricsSnapshot())
        self._evidence.unanswered = True
        self._evidence.accepted = self._evidence.accepted or accepted
        self._evidence.hidden = waiting
        return self._hold(t, engine_t)

    def _went_down(self, t: float) -> list[DetectorEvent]:
        events = self._end(t)
        # A rate across a gap in the data would blur the gap: start afresh when back.
        self._prev = None
        if self._down_since is None:
            self._down_since = t
        self._state = DetectorState(
            "down", self._down_since, t - self._down_since, gpu_checked=self._gpu_checked
        )
        return events

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
        # what the rule counts: the engine's clock, never past the wall's (see the module's text)
        quiet = min(engine_t - self._onset_engine_t, elapsed)
        events: list[DetectorEvent] = []
        if self._kind is None and quiet >= self._config.stall_after_s:
            self._kind = classify(self._evidence)
            said = _said(self._evidence)
            events.append(
                StallStarted(t, onset, self._kind, self._gpu_checked, self._onset_snapshot, said)
            )
        elif self._kind is not None:
            events.append(StallOngoing(t, onset, self._kind, self._gpu_checked, elapsed))
        stop_after = self._config.stop_after_s
        stop_due = stop_after is not None and quiet >= stop_after
        if self._kind is not None and stop_due and not self._stop_sent:
            self._stop_sent = True
            events.append(StopRequested(t, onset, elapsed))
        status: Status = "stalled" if self._kind is not None else "suspect"
        self._state = DetectorState(status, onset, elapsed, self._kind, self._gpu_checked)
        return events
