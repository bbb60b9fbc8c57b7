"""One agent's behaviour as a pure state machine: what to do next, given how the last request went.

The planner (`loadgen.workload`) says what each turn asks for; this machine says when: wait for
the agent's start, send a turn, retry a failed turn after its pause (up to ``max_retries``),
think between turns, stop after ``max_turns``. It does no I/O and knows no clock, so the same
logic drives the agents over HTTP on the wall clock (`loadgen.run`) and on an engine's own
virtual clock (the kit's in-process harness). Drive it with :meth:`AgentMachine.start`, then
:meth:`AgentMachine.waited` after each :class:`Wait` and :meth:`AgentMachine.answered` after
each :class:`Send`, until it returns :class:`Done`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from loadgen.config import LoadConfig
from loadgen.workload import TurnPlan, plan_agent, start_offset_s

__all__ = ["Action", "AgentMachine", "Done", "Send", "Wait"]


@dataclass(frozen=True, slots=True)
class Wait:
    """Pause for `seconds` of the load's clock; `why` is "start", "think" or "retry"."""

    seconds: float
    why: str


@dataclass(frozen=True, slots=True)
class Send:
    """Send one attempt of a planned turn (attempt 0 is the first try)."""

    plan: TurnPlan
    attempt: int


@dataclass(frozen=True, slots=True)
class Done:
    """The agent has played its turns."""


Action = Wait | Send | Done


class AgentMachine:
    """The decisions of agent `agent` under `cfg` (seeded: the same plan on every engine)."""

    def __init__(self, cfg: LoadConfig, agent: int) -> None:
        self.cfg = cfg
        self.agent = agent
        self._plans: Iterator[TurnPlan] = plan_agent(cfg, agent)
        self._plan: TurnPlan | None = None
        self._attempt = 0
        self._played = 0
        self._next: Action = Done()

    def start(self) -> Action:
        """The first action: wait for the agent's staggered start."""
        self._next = self._send_next()
        return Wait(start_offset_s(self.cfg, self.agent), "start")

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
            return Wait(plan.think_s, "retry")
        self._played += 1
        if self.cfg.max_turns is not None and self._played >= self.cfg.max_turns:
            return Done()
        self._next = self._send_next()
        return Wait(plan.think_s, "think")

    def _send_next(self) -> Send:
        self._plan = next(self._plans)
        self._attempt = 0
        return Send(self._plan, 0)
