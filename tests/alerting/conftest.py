"""Timelines of the simulator's core on a virtual clock (deterministic), shared by the rules
and promtool tests: one arm per stall kind (the base livelock spins, the others play the
simulator's faults), a healthy arm, an arm whose /metrics fails."""

from __future__ import annotations

import pytest

from tests.alerting.alerting_support import Recorded, virtual_timeline


@pytest.fixture(scope="session")
def timelines() -> dict[str, Recorded]:
    """Each kind from a fault at 1.5 s (spinning: the base livelock), healthy (short
    requests), down at 1.5 s."""
    return {
        "frozen": Recorded(virtual_timeline(4.0, fault="freeze")),
        "blocked": Recorded(virtual_timeline(5.0, fault="block", max_tokens=40)),
        "thrashing": Recorded(virtual_timeline(4.0, fault="thrash")),
        "busy_hang": Recorded(virtual_timeline(4.0, fault="busy_hang")),
        "dead_core": Recorded(virtual_timeline(4.0, fault="dead_core")),
        "spinning": Recorded(virtual_timeline(3.0, livelock=True)),
        "healthy": Recorded(virtual_timeline(4.0, max_tokens=300)),
        "down": Recorded(virtual_timeline(3.5, fail_metrics_at_s=1.5)),
    }
