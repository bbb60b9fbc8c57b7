"""The timeline writer's line shapes (the run-directory contract)."""

from __future__ import annotations

import json
from pathlib import Path

from monitor.events import (
    DetectorState,
    Down,
    GpuReading,
    Sample,
    StallEnded,
    StallOngoing,
    StallStarted,
    StopRequested,
    Up,
    Verdict,
)
from monitor.parse import parse_metrics
from monitor.rates import snapshot_deltas
from monitor.timeline import TimelineWriter

DATA = Path(__file__).parent / "data"


def test_lines_have_the_contract_shapes(tmp_path: Path) -> None:
    one = parse_metrics((DATA / "vllm-0.32-one-engine.txt").read_text())
    two = parse_metrics((DATA / "vllm-0.32-two-engines.txt").read_text())
    path = tmp_path / "run" / "timeline.jsonl"
    with TimelineWriter(path) as writer:
        writer.handle(Sample(0.0, one, None))
        writer.handle(Sample(1.0, two, snapshot_deltas(one, two, 1.0)))
        writer.handle(GpuReading(1.0, {"0": 87.0, "1": 0.0}))
        writer.handle(GpuReading(1.5, {}, error="nvidia-smi timed out"))
        writer.handle(Verdict(1.0, DetectorState("ok")))
        writer.handle(Down(2.0, "HTTP 503"))
        writer.handle(Up(3.0, 1.0))
        writer.handle(StallStarted(70.0, 10.0, "spinning", True, two))
        writer.handle(StallOngoing(71.0, 10.0, "spinning", True, 61.0))
        writer.handle(StopRequested(250.0, 10.0, 240.0))
        writer.handle(StallEnded(260.0, 10.0, "spinning", 250.0))
        # Flushed as it happens: readable before the writer closes.
        assert len(path.read_text().splitlines()) == 7
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    types = [line["type"] for line in lines]
    assert types == ["sample", "sample", "gpu", "down", "stall_started", "stop_requested",
                     "stall_ended"]  # fmt: skip
    first, second = lines[0], lines[1]
    assert set(first) == {
        "type", "t", "running", "waiting", "waiting_capacity", "waiting_deferred", "kv_usage",
        "gen_tokens", "gen_tok_s", "prompt_tokens", "preemptions", "prefix_queries",
        "prefix_hits", "iterations", "compute_s",
    }  # fmt: skip
    assert (first["running"], first["waiting"], first["gen_tok_s"]) == (12, 2, 0.0)
    assert first["compute_s"] is None
    assert second["compute_s"] == {"prefill": 4650.37, "decode": 4425.75}
    assert set(second["engines"]) == {"0", "1"}
    assert second["engines"]["1"]["kv_usage"] == 0.98
    assert lines[2] == {"type": "gpu", "t": 1.0, "util": {"0": 87.0, "1": 0.0}}
    assert lines[3] == {"type": "down", "t": 2.0, "error": "HTTP 503"}
    assert lines[4] == {
        "type": "stall_started", "t": 70.0, "onset": 10.0, "kind": "spinning",
        "gpu_checked": True,
    }  # fmt: skip
    assert lines[5] == {"type": "stop_requested", "t": 250.0, "onset": 10.0, "stall_s": 240.0}
    assert lines[6] == {
        "type": "stall_ended", "t": 260.0, "onset": 10.0, "kind": "spinning", "duration_s": 250.0,
    }  # fmt: skip
