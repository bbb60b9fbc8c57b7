"""Fixtures for report tests: saved seed directories (meta, kit, timeline, turns of one arm)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def _turn(agent: int, t: float) -> dict[str, Any]:
    return {
        "agent": agent,
        "session": 0,
        "turn": 0,
        "attempt": 0,
        "t_start": t,
        "t_end": t + 10.0,
        "ttft_s": 2.0 + agent,
        "chunks": [[2.0 + agent, 1], [4.0 + agent, 20], [10.0, 30]],
        "expected_prompt_tokens": 1000,
        "prompt_tokens": 1000,
        "completion_tokens": 51,
        "cached_tokens": 500,
        "max_tokens": 51,
        "outcome": "ok",
        "error": None,
        "status": 200,
    }


def write_seed_arm(root: Path, arm: str, seed: int, stall_onset: float | None) -> Path:
    """`root/arm/seed-N` as a virtual-clock arm writes it; a stall stops the run at onset+240."""
    d = root / arm / f"seed-{seed}"
    d.mkdir(parents=True)
    end = "stall_stop" if stall_onset is not None else "duration"
    meta = {"arm": arm, "spec": f"sim:{arm}", "kind": "sim", "clock": "virtual", "seed": seed}
    meta |= {"time_scale": 1.0, "planned_duration_s": 1000, "end_reason": end}
    meta |= {"stopped_by_monitor": stall_onset is not None, "engine_s": 1000.0, "wall_s": 1000.0}
    meta |= {"started_at": "2026-12-01T10:00:00+00:00"}
    (d / "meta.json").write_text(json.dumps(meta))
    (d / "kit.json").write_text(json.dumps({"name": "k"}))
    events: list[dict[str, Any]] = []
    for t in range(0, 1000, 100):
        events.append({"type": "gpu", "t": float(t), "util": {"0": 100.0, "1": 100.0}})
        # each seed its own run (a prefix-query count of its own), as seeds of a seeded
        # workload are: identical seeds would be one observation
        sample = {"type": "sample", "t": float(t), "kv_usage": 0.5, "running": 2}
        events.append(sample | {"prefix_queries": float(seed * 1000 + t)})
    if stall_onset is not None:
        events += [
            {
                "type": "stall_started",
                "t": stall_onset + 60,
                "onset": stall_onset,
                "kind": "spinning",
            },
            {
                "type": "stop_requested",
                "t": stall_onset + 240,
                "onset": stall_onset,
                "stall_s": 240,
            },
        ]
    (d / "timeline.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    turns = [_turn(agent, 50.0 * agent) for agent in range(3)]
    (d / "turns.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns))
    return d


SeedArmWriter = Callable[[Path, str, int, float | None], Path]


@pytest.fixture
def seed_arm() -> SeedArmWriter:
    """The writer of one saved seed directory of an arm."""
    return write_seed_arm
