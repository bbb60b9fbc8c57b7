"""Trace replay as a workload source: a trace's sessions become agents, its turns their plans.

The one planner both clocks use (`AgentMachine` over `TurnPlan`s) takes its turns from here
when the load names a trace: each session is one agent, playing its turns in order. A turn's
new content is `Content` parts: one per `hash_ids` block (its words drawn from the block's
id, so requests that share leading ids share exactly that prefix of words, hence of tokens
on the simulator and the twin), then the line's own tokens past its blocks. Times are the
trace's milliseconds times `trace_second_s` load seconds per trace second: a `timestamp`
holds a turn back until then (never before its previous turn ended), a `delay` counts from
the previous turn's end (from the previous line's arrival for a line without a session).

A window (AIPerf's fixed-schedule offsets, `stallkit.loadgen.traces.window`) cuts the trace first. The
words of a block or a line are drawn under a salt: by default one made of the trace file's
digest and the load's seed, so two traces, or two seeds, never share a prefix-cache block by
accident, while both arms of an A/B and every rerun of a seed send the same bytes.

`sessions_of` is pure; `replay_of` reads the file (once per file version) at the edge.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from stallkit.contract.trace import (
    MooncakeLine,
    SessionCall,
    Trace,
    TraceError,
    TraceReplay,
    message_text,
    read_trace,
)
from stallkit.loadgen.agent import AgentMachine, Wait
from stallkit.loadgen.arrivals import ArrivalGate, planned_arrivals
from stallkit.loadgen.config import MAX_AGENTS, LoadConfig
from stallkit.loadgen.traces.window import Window, span_s, windowed
from stallkit.loadgen.workload import Content, TurnPlan, plan_agent

__all__ = [
    "Replay",
    "ReplayTurn",
    "Workload",
    "load_trace",
    "replay_of",
    "sessions_of",
    "text_salt",
    "trace_replay",
    "workload_for",
]


@dataclass(frozen=True, slots=True)
class ReplayTurn:
    """One turn of a replayed session, in load seconds."""

    line: int
    #: not before this time (seconds since the run start); None: as soon as `delay_s` passed
    at_s: float | None
    #: after the previous turn of the session ended
    delay_s: float
    #: leading tokens of the previous prompt and reply kept; None: all of them
    keep_tokens: int | None
    content: tuple[Content, ...]
    output_tokens: int
    #: the request's whole chat as (role, text), when the trace gave one
    messages: tuple[tuple[str, str], ...] | None = None

    @property
    def new_tokens(self) -> int:
        return sum(part.tokens for part in self.content)


def _chat(req: MooncakeLine) -> tuple[tuple[str, str], ...] | None:
    if req.messages is None:
        return None
    return tuple((str(m["role"]), message_text(m)) for m in req.messages)


def _blocks(line: int, req: MooncakeLine, block_tokens: int, salt: str) -> tuple[Content, ...]:
    chat = _chat(req)
    if chat is not None:  # the words the engine's chat template makes of it
        rendered = [w for role, text in chat for w in (f"<|{role}|>", *text.split())]
        rendered.append("<|assistant|>")
        return (Content(f"x{line}", len(rendered), tuple(rendered)),)
    if req.text_input is not None:
        words = tuple(req.text_input.split()) or ("<|empty|>",)
        return (Content(f"x{line}", len(words), words),)
    assert req.input_length is not None
    left, parts = req.input_length, []
    for block_id in req.hash_ids or ():
        if left <= 0:
            break
        parts.append(Content(f"b{block_id}", min(block_tokens, left), salt=salt))
        left -= block_tokens
    if left > 0:
        parts.append(Content(f"t{line}", left, salt=salt))
    return tuple(parts)


def _mooncake(
    trace: Trace, block_tokens: int, second_s: float, salt: str
) -> list[list[ReplayTurn]]:
    sessions: dict[str, list[ReplayTurn]] = {}
    alone: list[list[ReplayTurn]] = []
    order: list[list[ReplayTurn]] = []
    arrival_s = 0.0  # the previous session-less line's arrival
    for line, req in trace.mooncake:
        at_s = None if req.timestamp is None else req.timestamp / 1000 * second_s
        delay_s = 0.0 if req.delay is None else req.delay / 1000 * second_s
        content, chat = _blocks(line, req, block_tokens, salt), _chat(req)
        if req.session_id is None:
            arrival_s = at_s if at_s is not None else arrival_s + delay_s
            turn = ReplayTurn(line, arrival_s, 0.0, 0, content, req.output_length, chat)
            alone.append([turn])
            order.append(alone[-1])
            continue
        out = req.output_length
        turns = sessions.get(req.session_id)
        if turns is None:  # a session's first turn: its delay counts from the run's start
            turns = sessions[req.session_id] = []
            order.append(turns)
            first_s = at_s if at_s is not None else delay_s
            turns.append(ReplayTurn(line, first_s, 0.0, 0, content, out, chat))
        else:  # a whole chat keeps nothing of the conversation before it
            keep = 0 if chat is not None else None
            turns.append(ReplayTurn(line, at_s, delay_s, keep, content, out, chat))
    return order


def _sessions(trace: Trace, second_s: float, salt: str) -> list[list[ReplayTurn]]:
    sessions: dict[str, list[ReplayTurn]] = {}
    last: dict[str, SessionCall] = {}
    for line, call in trace.sessions:
        at_s = None if call.timestamp is None else call.timestamp / 1000 * second_s
        delay_s = 0.0 if call.delay is None else call.delay / 1000 * second_s
        prev = last.get(call.session_id)
        last[call.session_id] = call
        turns = sessions.setdefault(call.session_id, [])
        keep: int | None = 0  # a first call shares nothing it could name
        kept = 0
        if prev is None:
            at_s, delay_s = (at_s if at_s is not None else delay_s), 0.0
        else:
            history = prev.prompt_tokens + prev.completion_tokens
            kept = min(call.cached_tokens, history)
            keep = None if kept == history else kept
        content = (Content(f"t{line}", call.prompt_tokens - kept, salt=salt),)
        turns.append(ReplayTurn(line, at_s, delay_s, keep, content, call.completion_tokens))
    return list(sessions.values())


def sessions_of(
    trace: Trace, block_tokens: int, second_s: float, salt: str = ""
) -> list[list[ReplayTurn]]:
    """The trace's sessions in order of first appearance, each its turns in file order, their
    drawn words under `salt`."""
    if trace.format == "sessions":
        return _sessions(trace, second_s, salt)
    return _mooncake(trace, block_tokens, second_s, salt)


def _plans(turns: list[ReplayTurn], agent: int) -> Iterator[TurnPlan]:
    session, index, prompt = 0, 0, 0
    for k, turn in enumerate(turns):
        if k and turn.keep_tokens == 0:
            session, index = session + 1, 0
        kept = prompt if turn.keep_tokens is None else turn.keep_tokens
        following = turns[k + 1] if k + 1 < len(turns) else None
        yield TurnPlan(
            agent=agent,
            session=session,
            turn=index,
            target_prompt_tokens=(kept if index else 0) + turn.new_tokens,
            max_tokens=turn.output_tokens,
            think_s=following.delay_s if following is not None else 0.0,
            text_seed=turn.line,
            system_seed=0,
            content=turn.content,
            keep_tokens=turn.keep_tokens if index else 0,
            resume_at_s=following.at_s if following is not None else None,
            messages=turn.messages,
        )
        prompt = (kept if index else 0) + turn.new_tokens + turn.output_tokens
        index += 1


class Workload:
    """Where the agents' turns come from: the synthetic model, or a trace's sessions; and
    when they start: paced by the agents, or by open-loop arrivals.

    Arrivals of sessions make one agent per arrival (agent i plays the synthetic model's
    first session of agent i from its arrival on); arrivals of requests are one gate the
    load's agents share (each run of the load makes its own workload, hence its own gate).
    """

    def __init__(
        self,
        cfg: LoadConfig,
        sessions: list[list[ReplayTurn]] | None = None,
        replay: TraceReplay | None = None,
    ) -> None:
        self.cfg = cfg
        self.sessions = sessions
        #: what of the trace is replayed (None: the synthetic workload)
        self.replay = replay
        self.agents = cfg.agents if sessions is None else len(sessions)
        self.gate: ArrivalGate | None = None
        #: arrival times of the sessions, one agent each (None: not arrivals of sessions)
        self.session_arrivals: list[float] | None = None
        if cfg.process != "closed" and sessions is None:
            times = planned_arrivals(
                cfg.process, cfg.burstiness, cfg.seed, cfg.rate_segments(), cfg.arrival_end_s
            )
            if cfg.arrival_unit == "sessions":
                self.session_arrivals = list(itertools.islice(times, MAX_AGENTS))
                self.agents = len(self.session_arrivals)
            else:
                self.gate = ArrivalGate(times)

    def machine(self, agent: int) -> AgentMachine:
        """Agent `agent`'s state machine."""
        if self.sessions is None:
            if self.session_arrivals is not None:
                start = Wait(0.0, "start", self.session_arrivals[agent])
                first = itertools.takewhile(
                    lambda plan: plan.session == 0, plan_agent(self.cfg, agent)
                )
                return AgentMachine(self.cfg, agent, first, start, arrived=True)
            return AgentMachine(self.cfg, agent, gate=self.gate)
        turns = self.sessions[agent]
        start = Wait(0.0, "start", turns[0].at_s if turns else None)
        return AgentMachine(self.cfg, agent, _plans(turns, agent), start)


@lru_cache(maxsize=8)
def _cached(path: str, mtime_ns: int, size: int) -> tuple[Trace, str]:
    trace = read_trace(Path(path))
    return trace, hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _loaded(path: Path) -> tuple[Trace, str]:
    """The trace at `path`, parsed once per version of the file, and its bytes' SHA-256."""
    try:
        stat = path.stat()
    except OSError:
        raise TraceError(f"trace {path} does not exist", "check the path") from None
    return _cached(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


def load_trace(path: Path) -> Trace:
    """The trace at `path`, parsed once per version of the file."""
    return _loaded(path)[0]


def text_salt(cfg: LoadConfig, sha256: str) -> str:
    """The salt of a replay's words: the load's own, or one of the trace's digest and seed."""
    if cfg.trace_salt is not None:
        return cfg.trace_salt
    return hashlib.sha256(f"stallkit:salt:{sha256}:{cfg.seed}".encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Replay:
    """A load's trace as it is replayed: its record and its sessions."""

    record: TraceReplay
    sessions: list[list[ReplayTurn]]


def replay_of(cfg: LoadConfig) -> Replay:
    """The load's trace (it must name one), windowed, timed and salted as the load says; made
    once per file version and settings (a seed's arms and its record share one)."""
    assert cfg.trace is not None, "a load without a trace replays nothing"
    path = Path(cfg.trace)
    sha256 = _loaded(path)[1]
    window = Window(cfg.trace_start_offset_ms, cfg.trace_end_offset_ms, cfg.trace_auto_offset)
    salt = text_salt(cfg, sha256)
    return _replay(path, sha256, window, cfg.trace_block_tokens, cfg.trace_second_s, salt)


@lru_cache(maxsize=8)
def _replay(
    path: Path, sha256: str, window: Window, block: int, second_s: float, salt: str
) -> Replay:
    trace = _loaded(path)[0]  # the version whose digest is the key's
    kept, zero = windowed(trace, window)
    sessions = sessions_of(kept, block, second_s, salt)
    record = TraceReplay(
        path=str(path),
        sha256=sha256,
        format=trace.format,
        requests=len(kept),
        sessions=len(sessions),
        left_out=len(trace) - len(kept),
        span_s=span_s(kept),
        start_offset_ms=window.start_ms,
        end_offset_ms=window.end_ms,
        zero_ms=zero,
        second_s=second_s,
        text_salt=salt,
    )
    return Replay(record, sessions)


def trace_replay(cfg: LoadConfig) -> TraceReplay | None:
    """What the load replays of its trace (None: it replays none)."""
    return None if cfg.trace is None else replay_of(cfg).record


def workload_for(cfg: LoadConfig) -> Workload:
    """The load's workload: its trace's sessions when it names one, else the synthetic model."""
    if cfg.trace is None:
        return Workload(cfg)
    replay = replay_of(cfg)
    return Workload(cfg, replay.sessions, replay.record)
