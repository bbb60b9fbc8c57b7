"""Timelines recorded once per session from live simulators (a frozen arm, a healthy arm, an
arm whose /metrics fails), shared by the rules and promtool tests."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from alerting_support import SCALE, Recorded, record


@pytest.fixture(scope="session")
def timelines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Recorded]:
    """frozen (freezes 1.5 wall s in), healthy (short requests), down (/metrics 503 after 1.5 s)."""
    root = tmp_path_factory.mktemp("timelines")

    async def all_three() -> list[Recorded]:
        return await asyncio.gather(
            record(root / "frozen", 4.0, 50_000, freeze_at_s=1.5 * SCALE),
            record(root / "healthy", 3.0, 400),
            record(root / "down", 3.5, 50_000, fail_metrics_at_s=1.5 * SCALE),
        )

    frozen, healthy, down = asyncio.run(all_three())
    return {"frozen": frozen, "healthy": healthy, "down": down}
