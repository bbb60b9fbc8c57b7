"""The timeline writer's line shapes (the run-directory contract)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from stallkit.monitor.detect.events import (
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
from stallkit.monitor.live.timeline import TimelineWriter, event_line, fast_json
from stallkit.monitor.signals.parse import EngineMetrics, MetricsSnapshot, parse_metrics
from stallkit.monitor.signals.rates import snapshot_deltas

DATA = Path(__file__).parents[1] / "data"


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


def _metrics(rng: random.Random) -> EngineMetrics:
    """An engine's view with every kind of value a page gives: absent, whole, tiny, huge."""

    def number() -> float | None:
        # (an int where a float belongs: what a type checker lets through)
        return rng.choice([None, 0.0, 3.0, 5, 2.5e-7, 1e-5, 0.1 + 0.2, 3e17, rng.random()])

    def count() -> int | None:
        return rng.choice([None, 0, 1, 7])

    return EngineMetrics(
        running=count(),
        waiting=count(),
        waiting_capacity=count(),
        waiting_deferred=count(),
        kv_usage=rng.choice([None, 0.0, 0.98765, 1.0, 0.00004]),
        gen_tokens=number(),
        prompt_tokens=number(),
        preemptions=number(),
        prefix_queries=number(),
        prefix_hits=number(),
        iterations=number(),
        compute_s=rng.choice([None, {}, {"prefill": 2.5e-7, "decode": 41.25}]),
    )


def test_the_fast_lines_are_the_models_json_to_the_byte() -> None:
    rng = random.Random(3)
    for i in range(2000):
        m = _metrics(rng)
        snapshot = MetricsSnapshot(
            **{f: getattr(m, f) for f in EngineMetrics.__slots__}, engines={"0": m}
        )
        previous = MetricsSnapshot(engines={"0": _metrics(rng)})
        t = rng.choice([i, i + 0.0004, i * 1.0001, 1e-5])  # whole (a fake clock's int) or not
        for event in (
            Sample(t, snapshot, snapshot_deltas(previous, snapshot, rng.choice([0.5, 1, 0]))),
            Sample(t, snapshot, None),
            GpuReading(t, {"0": rng.choice([0, 100, 37.125, 1e-5]), "1": rng.random() * 100}),
        ):
            line = event_line(event)
            assert line is not None
            assert fast_json(event) == line.model_dump_json()
    # per-engine views and failed readings go through the model
    two = parse_metrics((DATA / "vllm-0.32-two-engines.txt").read_text())
    assert fast_json(Sample(1.0, two, None)) is None
    assert fast_json(GpuReading(1.0, {}, error="timed out")) is None
