"""The virtual-clock arm driver: agents, an engine core and the monitor's step on engine time.

No sockets and no sleeping: the agents' state machines (`stallkit.loadgen.agent`, the same logic the HTTP
agents play) with their prompts from the one conversation builder (`stallkit.loadgen.conversation`), an
engine core (`stallkit.engine.core.protocol.EngineCore`: the simulator's) and the monitor's pure step
(`stallkit.monitor.detect.step`) advance over a heap of engine times. The core runs until the next thing that
can happen (an agent's pause ends, a scrape is due, a request's read timeout expires, a request
finishes); a read timeout (counted from the request's last token, as the HTTP client counts
it) aborts the request at that engine time. At every scrape tick the step gets the sample the
scraper would parse from the simulator's `/metrics` page for the same engine state, and a GPU
reading that averages the busy share since the previous tick. The arm recorder
(`stallkit.kits.arm.recorder`) writes the directory as for an HTTP arm, every time in engine seconds
(`time_scale` 1, `clock` "virtual"), with a forensics bundle at each stall's onset (the
scheduler's state, the detector's inputs, the engine log's tail). Deterministic: the same kit,
policy and seed give the same files apart from the wall-clock figures in meta.json.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from stallkit.contract.files import ENGINE_LOG
from stallkit.contract.meta import EndReason
from stallkit.contract.scheduler_state import SimState
from stallkit.engine import FINISH_REASONS, EngineCore, EngineError, EngineSpec, EngineStats
from stallkit.kits.arm.cores import virtual_core
from stallkit.kits.arm.recorder import ArmEnd, ArmRecorder, error_line
from stallkit.kits.kit import Kit
from stallkit.loadgen import (
    Action,
    LoadConfig,
    Outcome,
    PromptPart,
    Send,
    TurnRecord,
    Wait,
    WordConversation,
    workload_for,
)
from stallkit.monitor import (
    EngineMetrics,
    EngineTarget,
    ForensicsCollector,
    MetricsSnapshot,
    MonitorConfig,
    MonitorStep,
    StallStarted,
    StopRequested,
)

__all__ = ["VirtualDriver", "VirtualResult", "run_virtual_arm", "snapshot_of"]


def snapshot_of(stats: EngineStats, step_counter: bool = False) -> MetricsSnapshot:
    """The sample the monitor would parse from the engine's /metrics for this engine state.

    `step_counter`: the engine exports `vllm:scheduler_steps_total` (the twin counts its
    steps, as the patched plugin does on a real engine); the simulator's page has none. A
    core that died (fault `dead_core`) leaves a page without the engine's series.
    """
    if not stats.core_alive:
        return MetricsSnapshot()
    by_reason = stats.waiting_by_reason
    success = dict.fromkeys(FINISH_REASONS, 0) | stats.request_success
    compute = {"prefill": 0.0, "decode": 0.0} | stats.compute_s
    # one set of fields for the engine and the totals (a single engine: they are its own)
    values = {
        "running": stats.num_running,
        "waiting": stats.num_waiting,
        "waiting_capacity": by_reason.get("capacity", 0),
        "waiting_deferred": by_reason.get("deferred", 0),
        "kv_usage": float(stats.kv_usage),
        "gen_tokens": float(stats.generation_tokens),
        "prompt_tokens": float(stats.prompt_tokens),
        "preemptions": float(stats.num_preemptions),
        "prefix_queries": float(stats.prefix_cache_queries),
        "prefix_hits": float(stats.prefix_cache_hits),
        "request_success": {r: float(n) for r, n in success.items()},
        "iterations": float(stats.iteration_tokens.count),
        "prefill_compute_share": float(stats.prefill_compute_share),
        "compute_s": {c: float(v) for c, v in compute.items()},
        "steps": float(stats.steps) if step_counter else None,
    }
    return MetricsSnapshot(**values, engines={"0": EngineMetrics(**values)})  # type: ignore[arg-type]


@dataclass
class _Flight:
    """One request in flight: what was sent, and what has come back so far."""

    agent: int
    send: Send
    request_id: str
    prompt_tokens: int
    t_start: float
    last_byte_s: float
    parts: list[PromptPart]
    #: when the agent's pause ended (the request goes out at the next step boundary)
    ready_s: float
    seen_tokens: int = 0
    chunks: list[tuple[float, int]] = field(default_factory=list)


@dataclass(frozen=True)
class VirtualResult:
    """How a virtual arm ended (engine seconds), for the caller's progress line."""

    arm: str
    seed: int
    end_reason: EndReason
    engine_s: float
    wall_s: float
    stalled: bool


class VirtualDriver:
    """Moves the agents, one engine core and the monitor's step over a heap of engine times."""

    def __init__(
        self,
        core: EngineCore,
        load: LoadConfig,
        mon: MonitorConfig,
        recorder: ArmRecorder,
        step_counter: bool = False,
    ) -> None:
        self.core, self.load, self.mon, self.recorder = core, load, mon, recorder
        self.step_counter = step_counter
        self.step = MonitorStep(mon, gpu_checked=True)
        workload = workload_for(load)
        self.machines = [workload.machine(i) for i in range(workload.agents)]
        self.conversations = [WordConversation(load, i) for i in range(workload.agents)]
        self.timers: list[tuple[float, int, int]] = []  # (due, sequence, agent)
        self.flights: dict[str, _Flight] = {}
        self.seq = 0
        self.now = 0.0
        # the bundle at onset is written at once, in engine time, like every other file here
        target = EngineTarget("virtual", log_path=recorder.dir / ENGINE_LOG, state=self._state)
        forensics = ForensicsCollector(
            recorder.dir, "", target, mon.stall_after_s, background=False
        )
        recorder.add(forensics, forensics.close)
        self.prev: tuple[float, float] | None = None  # (t, busy s) at the last tick
        self._gpu_keys = [str(i) for i in range(core.num_gpus)]
        self._oldest_byte_s = float("inf")  # at most every flight's last byte (see `_timeouts`)
        self.stalled = False

    # -- agents -----------------------------------------------------------------------------
    def _act(self, agent: int, action: Action, ready_s: float | None = None) -> None:
        if isinstance(action, Wait):
            self.seq += 1
            heapq.heappush(self.timers, (action.due_s(self.now), self.seq, agent))
        elif isinstance(action, Send):
            self._send(agent, action, self.now if ready_s is None else ready_s)

    def _send(self, agent: int, send: Send, ready_s: float) -> None:
        conversation = self.conversations[agent]
        prompt = conversation.prompt(send)
        plan = send.plan
        rid = f"a{agent}-s{plan.session}-t{plan.turn}-{send.attempt}"
        flight = _Flight(
            agent, send, rid, len(prompt), self.now, self.now, conversation.parts, ready_s
        )
        try:
            continues = conversation.continues(send)
            self.core.add_request(rid, prompt, plan.max_tokens, self.now, continues=continues)
        except EngineError as exc:  # the core refused it: what an HTTP front answers with 400
            self._record(flight, "http_error", str(exc), status=400)
            self._act(agent, self.machines[agent].answered(False))
            return
        self.flights[rid] = flight
        self._oldest_byte_s = min(self._oldest_byte_s, self.now)

    def _record(
        self, flight: _Flight, outcome: Outcome, error: str | None, status: int | None = 200
    ) -> None:
        info = self.core.request_info(flight.request_id)
        plan = flight.send.plan
        first = info.first_token_s if info is not None else None
        record = TurnRecord(
            agent=flight.agent,
            session=plan.session,
            turn=plan.turn,
            attempt=flight.send.attempt,
            t_start=flight.t_start,
            t_end=self.now,
            ttft_s=None if first is None else first - flight.t_start,
            chunks=flight.chunks,
            expected_prompt_tokens=flight.prompt_tokens,
            prompt_tokens=info.prompt_tokens if info is not None else None,
            completion_tokens=flight.seen_tokens if info is not None else None,
            cached_tokens=info.cached_prompt_tokens if info is not None else None,
            max_tokens=plan.max_tokens,
            outcome=outcome,
            error=error,
            status=status,
            prompt_parts=flight.parts,
            t_ready=flight.ready_s,
            t_arrival=flight.send.arrival_s,
        )
        self.recorder.turns.write(record)

    # -- the engine -------------------------------------------------------------------------
    def _collect(self, finished: Mapping[str, str]) -> None:
        """New tokens of every request in flight arrive as one chunk at the current time (a
        finished request's at its finish)."""
        core = self.core
        for rid, flight in self.flights.items():
            tokens = core.output_tokens(rid) or 0
            if tokens <= flight.seen_tokens:
                continue
            at = self.now
            if rid in finished:
                info = core.request_info(rid)
                if info is not None and info.finished_s is not None:
                    at = info.finished_s
            flight.chunks.append((at - flight.t_start, tokens - flight.seen_tokens))
            flight.seen_tokens = tokens
            flight.last_byte_s = at

    def _finished(self, request_id: str) -> None:
        flight = self.flights.pop(request_id, None)
        if flight is None:
            return
        self._record(flight, "ok", None)
        # the agent's conversation holds this request's prompt (one request in flight per agent)
        reply = self.core.reply_words(request_id, flight.seen_tokens)
        self.conversations[flight.agent].answered(request_id, reply)
        self._act(flight.agent, self.machines[flight.agent].answered(True))

    def _timeouts(self) -> None:
        # `_oldest_byte_s` is at most the oldest last byte of any flight (a byte only moves
        # later, a new request lowers it to now): if even it is within the limit, all are
        limit = self.load.read_timeout_s
        if self.now - self._oldest_byte_s < limit:
            return
        for rid, flight in list(self.flights.items()):
            if self.now - flight.last_byte_s >= limit:
                self.core.abort(rid, self.now)
                del self.flights[rid]
                tokens = flight.seen_tokens
                why = f"no byte within the read timeout (after {tokens} tokens)"
                self._record(flight, "timeout", why)
                self._act(flight.agent, self.machines[flight.agent].answered(False))

    def _next_deadline(self, horizon: float) -> float:
        """The next timer or read timeout, where it comes before `horizon`."""
        limit = self.load.read_timeout_s
        due = self._oldest_byte_s + limit
        if due < horizon:  # the bound may be stale: the flights' own oldest byte
            oldest = min((f.last_byte_s for f in self.flights.values()), default=float("inf"))
            self._oldest_byte_s = oldest
            due = oldest + limit
        if self.timers:
            return min(due, self.timers[0][0])
        return due

    # -- the monitor ------------------------------------------------------------------------
    def _tick(self) -> bool:
        """One monitor tick at the current engine time; True when the step asks to stop."""
        stats = self.core.stats
        t = self.now
        util = 0.0
        if self.prev is not None:
            prev_t, prev_busy = self.prev
            dt = t - prev_t
            util = 100.0 * min(1.0, (stats.busy_s - prev_busy) / dt) if dt > 0 else 0.0
        self.prev = (t, stats.busy_s)
        gpus = dict.fromkeys(self._gpu_keys, round(util, 2))
        stop = False
        # the requests the agents wait on are pending work, whatever the gauges read
        snapshot = snapshot_of(stats, self.step_counter)
        for event in self.step.events(t, snapshot, gpus, client_pending=len(self.flights)):
            self.recorder.event(event)
            self.stalled = self.stalled or isinstance(event, StallStarted)
            stop = stop or isinstance(event, StopRequested)
        return stop

    def _state(self) -> SimState:
        """What the simulator's `/debug/state` would serve now."""
        return self.core.debug_state(self.now)

    def run(self) -> EndReason:
        """Run to the load's duration or a stall stop; the end reason."""
        end_s = float(self.load.duration_s or 0.0)
        interval = self.mon.interval_s
        for i, machine in enumerate(self.machines):
            self._act(i, machine.start())
        next_tick = 0.0
        while True:
            if self.now >= next_tick:
                if self._tick():
                    return "stall_stop"
                next_tick = (int(self.now / interval) + 1) * interval
            if self.now >= end_s:
                return "duration"
            while self.timers and self.timers[0][0] <= self.now:
                due, _, agent = heapq.heappop(self.timers)
                self._act(agent, self.machines[agent].waited(), due)
            self._timeouts()
            horizon = min(next_tick, end_s)
            until = min(horizon, self._next_deadline(horizon))
            if not self.core.has_work():
                self.now = max(self.now, until)
                continue
            step = self.core.advance(self.now, until)
            self.now = step.now_s
            self._collect(step.finished)
            for request_id in step.finished:
                self._finished(request_id)

    def close(self) -> None:
        """Requests still in flight end as `aborted`."""
        for flight in list(self.flights.values()):
            self._record(flight, "aborted", "the run stopped while the request was in flight")
        self.flights.clear()


def _arm_logger(arm_dir: Path) -> tuple[logging.Logger, logging.Handler]:
    log = logging.getLogger(f"stallkit.vclock.{arm_dir.resolve()}")
    log.propagate = False
    log.setLevel(logging.INFO)
    handler = logging.FileHandler(arm_dir / ENGINE_LOG, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    log.addHandler(handler)
    return log, handler


def run_virtual_arm(
    kit: Kit,
    arm: str,
    spec: EngineSpec,
    arm_dir: Path,
    *,
    stop_on_stall: bool = True,
    at_end: Callable[[EngineCore, float], None] | None = None,
) -> VirtualResult:
    """Run one `sim:` or `twin:` arm of `kit` on the virtual clock and write its directory.

    `spec` is the arm's as planned, with the capabilities the kit gives it (meta.json records
    them). `stop_on_stall=False` keeps running through a stall (the monitor's stop is disabled).
    `at_end` is given the engine core and its engine time once the run has ended (`kit hunt`
    steps a stalled engine on to log its steps).
    """
    mon_fields = kit.monitor.model_dump(exclude={"gpu_source"})
    if not stop_on_stall:
        mon_fields["stop_after_s"] = None
    mon = MonitorConfig.model_validate(mon_fields)
    caps = spec.capabilities
    recorder = ArmRecorder.open(
        arm_dir,
        kit,
        arm=arm,
        spec=spec.raw,
        kind=spec.kind,
        clock="virtual",
        time_scale=1.0,
        capabilities=caps,
    )
    end = ArmEnd("starting")
    log, handler = _arm_logger(arm_dir)
    driver: VirtualDriver | None = None
    t0 = time.perf_counter()
    try:
        core = virtual_core(kit, spec, arm, log)
        driver = VirtualDriver(core, kit.load, mon, recorder, caps.step_counter)
        end = ArmEnd(driver.run())
        if at_end is not None:
            at_end(core, driver.now)
    except EngineError as exc:  # the engine refused its configuration: the command's error
        end = ArmEnd("error", error_line(exc))
        raise
    except Exception as exc:  # the engine (a user's scheduler, say) failed mid-run: this
        # arm ends in error with the traceback in its engine log; the other arms go on
        log.exception("the engine core failed at engine time %.3f s", getattr(driver, "now", 0))
        end = ArmEnd("error", error_line(exc))
    except BaseException as exc:
        reason: EndReason = "interrupted" if isinstance(exc, KeyboardInterrupt) else "error"
        end = ArmEnd(reason, error_line(exc))
        raise
    finally:
        engine_s = 0.0
        if driver is not None:
            driver.close()
            engine_s = driver.now
        log.removeHandler(handler)
        handler.close()
        compute_s = round(time.perf_counter() - t0, 3)
        # the arm's files are in engine seconds; its wall time is the time it took to compute
        meta = recorder.finish(
            replace(end, wall_s=compute_s, engine_s=engine_s, compute_wall_s=compute_s)
        )
    stalled = driver is not None and driver.stalled
    return VirtualResult(arm, kit.load.seed, meta.end_reason, engine_s, compute_s, stalled)
