"""What a run's own clients wait on: the requests its agents sent that have not ended.

An engine's gauges may say idle while it holds requests it no longer answers (a kernel hang
that went unnoticed for hours with nothing "running"). The agents know better: a request
they sent and still wait on is pending work, whatever the engine's page reads, and the
detector's rule (no progress for `stall_after_s` with work pending) then holds for it as for
the engine's own queue. The HTTP arm feeds `ClientWaits` its agents' state changes and
hands `waiting` to the monitor; the virtual-clock arm counts its requests in flight.
"""

from __future__ import annotations

from stallkit.loadgen import AgentState

__all__ = ["ClientWaits"]

#: an agent in these states has a request out (sent, no token yet; or tokens arriving)
IN_FLIGHT = frozenset({"queued", "streaming"})


class ClientWaits:
    """The agents with a request in flight, followed from their state changes."""

    def __init__(self) -> None:
        self._agents: set[int] = set()

    def load(self, event: object) -> None:
        """Follow one of the agents' events (any other state than in flight answers)."""
        if not isinstance(event, AgentState):
            return
        if event.state in IN_FLIGHT:
            self._agents.add(event.agent)
        else:
            self._agents.discard(event.agent)

    def waiting(self) -> int:
        """Requests the agents are waiting on now."""
        return len(self._agents)
