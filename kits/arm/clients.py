"""What a run's own clients wait on: the requests its agents sent that have not ended.

An engine's gauges may say idle while it holds requests it no longer answers (a kernel hang
that went unnoticed for hours with nothing "running"). The agents know better: a request
they sent and still wait on is pending work, whatever the engine's page reads, and the
detector's rule (no progress for `stall_after_s` with work pending) then holds for it as for
the engine's own queue. The HTTP arm feeds `ClientWaits` its agents' state changes and
hands `waiting` to the monitor; the virtual-clock arm counts its requests in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from stallkit.loadgen import AgentState

__all__ = ["ClientWaits"]

#: Wall seconds a request sent but not yet answered is counted as in transit, not yet the
#: engine's: at a high time scale a few milliseconds between the agent and the engine's queue
#: are engine minutes, and a healthy engine starting up would read as wedged (its gauges at 0,
#: requests on their way). A request whose tokens are arriving is the engine's at once.
IN_TRANSIT_S = 2.0


class ClientWaits:
    """The agents with a request in flight, followed from their state changes: a request
    streaming tokens counts at once, one sent and unanswered after `in_transit_s` wall s."""

    def __init__(
        self, in_transit_s: float = IN_TRANSIT_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._in_transit_s = in_transit_s
        self._clock = clock
        self._sent: dict[int, float] = {}  # agent -> when its request was sent (no token yet)
        self._streaming: set[int] = set()

    def load(self, event: object) -> None:
        """Follow one of the agents' events (any other state than in flight answers)."""
        if not isinstance(event, AgentState):
            return
        agent = event.agent
        self._streaming.discard(agent)
        self._sent.pop(agent, None)
        if event.state == "queued":
            self._sent[agent] = self._clock()
        elif event.state == "streaming":
            self._streaming.add(agent)

    def waiting(self) -> int:
        """Requests the agents are waiting on now (those still in transit left out)."""
        now = self._clock()
        unanswered = sum(now - t >= self._in_transit_s for t in self._sent.values())
        return len(self._streaming) + unanswered
