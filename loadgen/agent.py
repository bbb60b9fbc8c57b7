"""One agent's behaviour as a pure state machine: what to do next, given how the last request went.

The planner (`stallkit.loadgen.workload`) says what each turn asks for; this machine says when: wait for
the agent's start, send a turn, retry a failed turn after its pause (up to ``max_retries``),
think between turns, stop after ``max_turns``. It does no I/O and knows no clock, so the same
logic drives the agents over HTTP on the wall clock (`stallkit.loadgen.agents`) and on an engine's own
virtual clock (the kit's in-process harness). Drive it with :meth:`AgentMachine.start`, then
:meth:`AgentMachine.waited` after each :class:`Wait` and :meth:`AgentMachine.answered` after
each :class:`Send`, until it returns :class:`Done`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from stallkit.loadgen.arrivals import ArrivalGate
from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.workload import TurnPlan, plan_agent, start_offset_s

__all__ = ["Action", "AgentMachine", "Done", "Send", "Wait"]


@dataclass(frozen=True, slots=True)
class Wait:
    """Pause for `seconds` of the load's clock; `why` is "start", "think" or "retry".

    `until_s` (a replayed trace's timestamp, seconds since the run start) holds the pause on
    until then when that is later.
    """

    seconds: float
    why: str
    until_s: float | None = None

    def due_s(self, now_s: float) -> float:
        """When the pause ends, for a pause that begins at `now_s`."""
        due = now_s + self.seconds
        return due if self.until_s is None else max(due, self.until_s)


@dataclass(frozen=True, slots=True)
class Send:
    """Send one attempt of a planned turn (attempt 0 is the first try).

    `arrival_s`: the open-loop arrival the send was planned at (seconds since the run start;
    None: a closed-loop send), recorded with the request.
    """

    plan: TurnPlan
    attempt: int
    arrival_s: float | None = None


@dataclass(frozen=True, slots=True)
class Done:
    """The agent has played its turns."""


Action = Wait | Send | Done


class AgentMachine:
    """The decisions of agent `agent` under `cfg` (seeded: the same plan on every engine).

    `plans` and `start` replace the synthetic model's turns and staggered start (a replayed
    trace's session, an arriving session); the agent is done when its plans run out. `start`'s
    `until_s` is recorded as the first send's arrival when `arrived` is set. `gate`: every
    send waits for an arrival the agent claims from it when it is free (requests arriving
    open loop, in place of pauses); the agent is done when the arrivals end.
    """

    def __init__(
        self,
        cfg: LoadConfig,
        agent: int,
        plans: Iterator[TurnPlan] | None = None,
        start: Wait | None = None,
        *,
        gate: ArrivalGate | None = None,
        arrived: bool = False,
    ) -> None:
        self.cfg = cfg
        self.agent = agent
        self._gate = gate
        self._arrived = arrived
        self._plans: Iterator[TurnPlan] = plan_agent(cfg, agent) if plans is None else plans
        self._start = Wait(start_offset_s(cfg, agent), "start") if start is None else start
        self._plan: TurnPlan | None = None
        self._attempt = 0
        self._played = 0
        self._next: Action = Done()

    def start(self) -> Action:
        """The first action: wait for the agent's start."""
        self._next = self._send_next()
        if self._gate is not None:
            return self._gated("start")
        if self._arrived and isinstance(self._next, Send):
            self._next = replace(self._next, arrival_s=self._start.until_s)
        return self._start

    def waited(self) -> Action:
        """A `Wait` is over: the action it was holding back."""
        return self._next

    def answered(self, ok: bool) -> Action:
        """The last `Send` ended, successfully or not: what the agent does next."""
        plan = self._plan
        assert plan is not None, "answered() before any Send"
        if not ok and self._attempt < self.cfg.max_retries:
            self._attempt += 1
            self._next = Send(plan, self._attempt)
            return self._gated("retry") if self._gate else Wait(plan.think_s, "retry")
        self._played += 1
        if self.cfg.max_turns is not None and self._played >= self.cfg.max_turns:
            return Done()
        self._next = self._send_next()
        if isinstance(self._next, Done):
            return self._next
        if self._gate is not None:
            return self._gated("arrival")
        return Wait(plan.think_s, "think", plan.resume_at_s)

    def _gated(self, why: str) -> Wait | Done:
        """Claim the next arrival for the pending send: wait until it (None: none is left)."""
        assert self._gate is not None
        arrival = self._gate.claim() if isinstance(self._next, Send) else None
        if arrival is None or not isinstance(self._next, Send):
            self._next = Done()
            return self._next
        self._next = replace(self._next, arrival_s=arrival)
        return Wait(0.0, why, arrival)

    def _send_next(self) -> Send | Done:
        self._plan = next(self._plans, None)
        self._attempt = 0
        return Done() if self._plan is None else Send(self._plan, 0)
