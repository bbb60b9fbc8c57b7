"""A simulator arm on the engine's own (virtual) clock: agents, engine core and detector in one process.

No sockets and no sleeping: the agents' state machines (`loadgen.agent`, the same logic the HTTP
agents play), the simulator's pure core and the monitor's stall detector all advance on engine
time. The core runs until the next thing that can happen (an agent's pause ends, a scrape is
due, a request's read timeout expires, a request finishes); a read timeout (counted from the
request's last token, as the HTTP client counts it) aborts the request at that engine time. At
every scrape tick the detector gets the same typed sample the scraper would parse from the
simulator's `/metrics` page for the same engine state, and a GPU reading that averages the
busy share since the previous tick. The arm directory is written as an HTTP arm writes it,
every time in engine seconds (`time_scale` 1, `clock` "virtual"), with a forensics bundle at
each stall's onset (the scheduler's state, the detector's inputs, the engine log's tail). Deterministic: the same kit,
policy and seed give the same files apart from the wall-clock timestamps in meta.json.
"""

from __future__ import annotations

import heapq
import logging
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from contract.files import (
    ENGINE_LOG,
    KIT_FILE,
    META_FILE,
    SUMMARY_FILE,
    TIMELINE_FILE,
    TURNS_FILE,
)
from contract.jsonl import write_json
from contract.kitfile import KitFile
from contract.meta import ArmMeta
from contract.records import read_records
from contract.simstate import SimState
from contract.summary import summarize
from engine import SimConfig
from engine.sim.core import EngineStats, SimEngine, SimRequestError, output_words
from engine.sim.metrics import FINISH_REASONS
from kits.config import Kit
from loadgen import (
    Action,
    AgentMachine,
    LoadConfig,
    Outcome,
    RecordWriter,
    Send,
    TurnRecord,
    Wait,
)
from monitor import (
    EngineMetrics,
    EngineTarget,
    ForensicsCollector,
    MetricsSnapshot,
    MonitorConfig,
    MonitorStep,
    StallStarted,
    StopRequested,
    TimelineWriter,
)

__all__ = ["VirtualResult", "run_virtual_arm", "snapshot_of"]


def snapshot_of(stats: EngineStats) -> MetricsSnapshot:
    """The sample the monitor would parse from the simulator's /metrics for this engine state."""
    engine = EngineMetrics(
        running=stats.num_running,
        waiting=stats.num_waiting,
        waiting_capacity=stats.waiting_by_reason.get("capacity", 0),
        waiting_deferred=stats.waiting_by_reason.get("deferred", 0),
        kv_usage=float(stats.kv_usage),
        gen_tokens=float(stats.generation_tokens),
        prompt_tokens=float(stats.prompt_tokens),
        preemptions=float(stats.num_preemptions),
        prefix_queries=float(stats.prefix_cache_queries),
        prefix_hits=float(stats.prefix_cache_hits),
        request_success={
            r: float(n)
            for r, n in (dict.fromkeys(FINISH_REASONS, 0) | stats.request_success).items()
        },
        iterations=float(stats.iteration_tokens.count),
        prefill_compute_share=float(stats.prefill_compute_share),
        compute_s={
            c: float(s) for c, s in ({"prefill": 0.0, "decode": 0.0} | stats.compute_s).items()
        },
    )
    values = {name: getattr(engine, name) for name in EngineMetrics.__slots__}
    return MetricsSnapshot(**values, engines={"0": engine})


@cache
def _word_pool() -> tuple[str, ...]:
    # distinct words; every conversation starts with its own header, so two conversations
    # never share a cache block even when their content slices overlap
    return tuple(f"w{i}" for i in range(400_000))


def _words(seed: int, count: int) -> tuple[str, ...]:
    pool = _word_pool()
    count = max(0, min(count, len(pool)))
    start = random.Random(seed).randrange(0, len(pool) - count + 1)
    return pool[start : start + count]


@dataclass
class _Flight:
    """One request in flight: what was sent, and what has come back so far."""

    agent: int
    send: Send
    request_id: str
    prompt_tokens: int
    t_start: float
    last_byte_s: float
    seen_tokens: int = 0
    chunks: list[tuple[float, int]] = field(default_factory=list)


@dataclass(frozen=True)
class VirtualResult:
    """How a virtual arm ended (engine seconds), for the caller's progress line."""

    arm: str
    seed: int
    end_reason: str
    engine_s: float
    wall_s: float
    stalled: bool


class _Harness:
    """Joins the agents, the engine core and the detector on one engine clock."""

    def __init__(
        self, kit: Kit, policy: str, arm_dir: Path, mon: MonitorConfig, log: logging.Logger
    ) -> None:
        self.load: LoadConfig = kit.load
        self.mon = mon
        cfg = kit.sim.engine.model_copy(update={"policy": policy})
        self.sim: SimConfig = SimConfig.model_validate(cfg.model_dump())
        self.engine = SimEngine(self.sim, log)
        self.step = MonitorStep(mon, gpu_checked=True)
        self.machines = [AgentMachine(self.load, i) for i in range(self.load.agents)]
        # each agent's conversation: the tokens of its last prompt (kept as a list, so a turn
        # extends it instead of copying it) and how many of them the last finished turn (its
        # prompt and reply) accounts for
        self.conversation: list[list[str]] = [[] for _ in self.machines]
        self.history_len = [0 for _ in self.machines]
        # the request whose prompt and reply those are (the engine reuses its block hashes)
        self.history_id: list[str | None] = [None for _ in self.machines]
        self.timers: list[tuple[float, int, int]] = []  # (due, sequence, agent)
        self.flights: dict[str, _Flight] = {}
        self.seq = 0
        self.now = 0.0
        self.records = RecordWriter(arm_dir / TURNS_FILE)
        self.timeline = TimelineWriter(arm_dir / TIMELINE_FILE)
        # the bundle at onset is written at once, in engine time, like every other file here
        target = EngineTarget("virtual", log_path=arm_dir / ENGINE_LOG, state=self._state)
        self.forensics = ForensicsCollector(
            arm_dir, "", target, mon.stall_after_s, background=False
        )
        self.prev: tuple[float, float] | None = None  # (t, busy s) at the last tick
        self.stalled = False

    # -- agents -----------------------------------------------------------------------------
    def _act(self, agent: int, action: Action) -> None:
        if isinstance(action, Wait):
            self.seq += 1
            heapq.heappush(self.timers, (self.now + action.seconds, self.seq, agent))
        elif isinstance(action, Send):
            self._send(agent, action)

    def _prompt(self, agent: int, plan_send: Send) -> list[str]:
        """The turn's prompt: the conversation so far (or a new system prompt), new content.

        The agent's own list, not a copy: the engine keeps no reference to a prompt's tokens.
        """
        plan = plan_send.plan
        tokens = self.conversation[agent]
        if plan.turn == 0:
            tokens[:] = ("<|system|>", f"a{agent}", f"s{plan.system_seed}")
            tokens += _words(plan.system_seed, self.load.system_prompt_tokens - 3)
        else:
            del tokens[self.history_len[agent] :]
        tokens += _words(plan.text_seed, plan.target_prompt_tokens - len(tokens))
        return tokens

    def _send(self, agent: int, send: Send) -> None:
        if send.attempt == 0 and send.plan.turn == 0:
            self.history_len[agent] = 0
            self.history_id[agent] = None
        prompt = self._prompt(agent, send)
        plan = send.plan
        rid = f"a{agent}-s{plan.session}-t{plan.turn}-{send.attempt}"
        flight = _Flight(agent, send, rid, len(prompt), self.now, self.now)
        try:
            continues = self.history_id[agent] if plan.turn else None
            self.engine.add_request(rid, prompt, plan.max_tokens, self.now, continues=continues)
        except SimRequestError as exc:
            self._record(flight, "http_error", str(exc), status=400)
            self._act(agent, self.machines[agent].answered(False))
            return
        self.flights[rid] = flight

    def _record(
        self, flight: _Flight, outcome: Outcome, error: str | None, status: int | None = 200
    ) -> TurnRecord:
        info = self.engine.request_info(flight.request_id)
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
        )
        self.records.write(record)
        return record

    # -- the engine -------------------------------------------------------------------------
    def _collect(self) -> None:
        """New tokens of every request in flight arrive as one chunk at the current time."""
        engine = self.engine
        for flight in self.flights.values():
            if (engine.output_tokens(flight.request_id) or 0) <= flight.seen_tokens:
                continue
            info = engine.request_info(flight.request_id)
            if info is not None and info.output_tokens > flight.seen_tokens:
                at = info.finished_s if info.finished_s is not None else self.now
                flight.chunks.append((at - flight.t_start, info.output_tokens - flight.seen_tokens))
                flight.seen_tokens = info.output_tokens
                flight.last_byte_s = at

    def _finished(self, request_id: str) -> None:
        flight = self.flights.pop(request_id, None)
        if flight is None:
            return
        self._record(flight, "ok", None)
        # the agent's conversation holds this request's prompt (one request in flight per agent)
        self.conversation[flight.agent] += output_words(request_id, 0, flight.seen_tokens)
        self.history_len[flight.agent] = len(self.conversation[flight.agent])
        self.history_id[flight.agent] = request_id
        self._act(flight.agent, self.machines[flight.agent].answered(True))

    def _timeouts(self) -> None:
        limit = self.load.read_timeout_s
        for rid, flight in list(self.flights.items()):
            if self.now - flight.last_byte_s >= limit:
                self.engine.abort(rid, self.now)
                del self.flights[rid]
                self._record(
                    flight,
                    "timeout",
                    f"no byte within the read timeout (after {flight.seen_tokens} tokens)",
                )
                self._act(flight.agent, self.machines[flight.agent].answered(False))

    def _next_deadline(self) -> float:
        due = [flight.last_byte_s + self.load.read_timeout_s for flight in self.flights.values()]
        if self.timers:
            due.append(self.timers[0][0])
        return min(due, default=float("inf"))

    # -- the monitor ------------------------------------------------------------------------
    def _scrape(self) -> bool:
        """One monitor tick at the current engine time; True when the detector asks to stop."""
        stats = self.engine.stats
        t = self.now
        util = 0.0
        if self.prev is not None:
            prev_t, prev_busy = self.prev
            dt = t - prev_t
            util = 100.0 * min(1.0, (stats.busy_s - prev_busy) / dt) if dt > 0 else 0.0
        self.prev = (t, stats.busy_s)
        gpus = {str(i): round(util, 2) for i in range(self.sim.num_gpus)}
        stop = False
        for event in self.step.events(t, snapshot_of(stats), gpus):
            self.timeline.write(event)
            self.forensics.handle(event)
            if isinstance(event, StallStarted):
                self.stalled = True
            stop = stop or isinstance(event, StopRequested)
        return stop

    def _state(self) -> SimState:
        """What the simulator's `/debug/state` would serve now."""
        return self.engine.debug_state(self.now)

    def run(self) -> str:
        """Run to the load's duration or a stall stop; the end reason."""
        end_s = float(self.load.duration_s or 0.0)
        interval = self.mon.interval_s
        for i, machine in enumerate(self.machines):
            self._act(i, machine.start())
        next_tick = 0.0
        while True:
            if self.now >= next_tick:
                if self._scrape():
                    return "stall_stop"
                next_tick = (int(self.now / interval) + 1) * interval
            if self.now >= end_s:
                return "duration"
            while self.timers and self.timers[0][0] <= self.now:
                _, _, agent = heapq.heappop(self.timers)
                self._act(agent, self.machines[agent].waited())
            self._timeouts()
            until = min(next_tick, end_s, self._next_deadline())
            if not self.engine.has_work():
                self.now = max(self.now, until)
                continue
            step = self.engine.advance(self.now, until)
            self.now = step.now_s
            self._collect()
            for request_id in step.finished:
                self._finished(request_id)

    def close(self) -> None:
        """Requests still in flight end as `aborted`; the files are closed."""
        for flight in list(self.flights.values()):
            self._record(flight, "aborted", "the run stopped while the request was in flight")
        self.flights.clear()
        self.records.close()
        self.timeline.close()


def _arm_logger(arm_dir: Path) -> tuple[logging.Logger, logging.Handler]:
    log = logging.getLogger(f"stallkit.vclock.{arm_dir.resolve()}")
    log.propagate = False
    log.setLevel(logging.INFO)
    handler = logging.FileHandler(arm_dir / ENGINE_LOG, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    log.addHandler(handler)
    return log, handler


def run_virtual_arm(
    kit: Kit, arm: str, spec: str, policy: str, arm_dir: Path, *, stop_on_stall: bool = True
) -> VirtualResult:
    """Run one simulator arm of `kit` on the virtual clock and write its directory.

    `stop_on_stall=False` keeps running through a stall (the monitor's stop is disabled).
    """
    arm_dir.mkdir(parents=True, exist_ok=True)
    mon_fields = kit.monitor.model_dump(exclude={"gpu_source"})
    if not stop_on_stall:
        mon_fields["stop_after_s"] = None
    mon = MonitorConfig.model_validate(mon_fields)
    write_json(
        arm_dir / KIT_FILE,
        KitFile.of(kit.model_dump(mode="json"), 1.0),
    )
    meta = ArmMeta.starting(
        arm=arm,
        spec=spec,
        kind="sim",
        clock="virtual",
        seed=kit.load.seed,
        time_scale=1.0,
        planned_duration_s=kit.load.duration_s,
        started_at=datetime.now(UTC).isoformat(),
    )
    end: dict[str, Any] = {"end_reason": "starting", "error": None}
    log, handler = _arm_logger(arm_dir)
    harness = _Harness(kit, policy, arm_dir, mon, log)
    t0 = time.perf_counter()
    try:
        end["end_reason"] = harness.run()
    except BaseException as exc:
        end["end_reason"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else "error"
        end["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise
    finally:
        harness.close()
        log.removeHandler(handler)
        handler.close()
        end["stopped_by_monitor"] = end["end_reason"] == "stall_stop"
        end["engine_s"] = round(harness.now, 3)
        # the arm's files are in engine seconds: its length is its engine time
        end["wall_s"] = round(harness.now, 3)
        end["compute_wall_s"] = round(time.perf_counter() - t0, 3)
        end["finished_at"] = datetime.now(UTC).isoformat()
        # meta.json first: it marks the directory as an arm, even if the summary then fails
        meta = meta.update(**end)
        write_json(arm_dir / META_FILE, meta)
        summary = summarize(read_records(arm_dir / TURNS_FILE))
        write_json(arm_dir / SUMMARY_FILE, summary.model_copy(update={"time_scale": 1.0}))
    return VirtualResult(
        arm,
        kit.load.seed,
        meta.end_reason,
        harness.now,
        meta.compute_wall_s or 0.0,
        harness.stalled,
    )
