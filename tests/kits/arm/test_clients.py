"""What a run's own clients wait on, on a fake clock: a request in transit is not yet the
engine's (a healthy engine starting at a high time scale must not read as wedged)."""

from __future__ import annotations

from stallkit.kits.arm.clients import ClientWaits
from stallkit.loadgen import AgentState


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_sent_request_counts_once_past_its_transit_and_a_streaming_one_at_once() -> None:
    clock = FakeClock()
    waits = ClientWaits(in_transit_s=2.0, clock=clock)
    waits.load(AgentState(0, "queued", 0.0))
    waits.load(AgentState(1, "queued", 0.0))
    assert waits.waiting() == 0  # on their way to the engine
    clock.t = 1.0
    waits.load(AgentState(1, "streaming", 1.0))
    assert waits.waiting() == 1  # tokens arriving: the engine holds it
    clock.t = 2.5
    assert waits.waiting() == 2  # unanswered past the transit: the engine owes it too
    waits.load(AgentState(0, "thinking", 2.5))
    waits.load(AgentState(1, "failed", 2.5))
    assert waits.waiting() == 0
    waits.load("not an agent's state")
    assert waits.waiting() == 0
