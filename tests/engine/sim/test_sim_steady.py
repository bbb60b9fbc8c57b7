"""The lean stepping of `advance` (runs of alike decode steps, repeats of the livelock's empty
step) gives the same engine, to the last bit, as `step` one step at a time.

A small saturated engine (3 slots, a pool the running requests fill, requests arriving while
others decode) on a fake clock, driven both ways with the same arrivals and aborts.
"""

from __future__ import annotations

import pytest

from stallkit.engine.sim.admission import Admission
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.core import SimEngine

#: a pool of small blocks, and one whose blocks outlast several prefill chunks (a step can
#: then book its whole budget in prefill chunks without allocating, and pass the waiting
#: queue with no budget left)
SIZES = {"small-blocks": (8, 30, 64), "big-blocks": (32, 9, 8)}


def _config(policy: str, sizes: str = "small-blocks") -> SimConfig:
    block_size, num_blocks, budget = SIZES[sizes]
    return SimConfig.model_validate(
        {
            "policy": policy,
            "block_size": block_size,
            "num_blocks": num_blocks,
            "max_num_seqs": 3,
            "max_num_batched_tokens": budget,
            "host_tier_blocks": 64,
            "restore_max_wait_s": 2.0,
            "prefill_compute_share": 0.4,
        }
    )


def _arrivals() -> list[tuple[float, str, list[str], int]]:
    """(time, id, prompt, max_tokens): conversations that come back with longer prompts."""
    out = []
    for i in range(14):
        agent = i % 5
        prompt = [f"a{agent}-{k}" for k in range(60 + 9 * (i // 5))]
        out.append((0.3 * i, f"r{i}", prompt, 80 + 11 * (i % 4)))
    return out


def _drive(
    policy: str, lean: bool, end_s: float = 40.0, sizes: str = "small-blocks"
) -> tuple[SimEngine, float, dict[str, str]]:
    engine = SimEngine(_config(policy, sizes))
    now, finished = 0.0, {}
    events = _arrivals()
    checkpoints = sorted({t for t, *_ in events} | {float(s) for s in range(int(end_s) + 1)})
    for until in checkpoints:
        while now < until and engine.has_work():
            if lean:
                result = engine.advance(now, until)
                now = result.now_s
                finished.update(result.finished)
            else:
                step = engine.step(now)
                now += step.duration_s
                finished.update(step.finished)
        now = max(now, until)
        for t, rid, prompt, max_tokens in events:
            if t == until:
                engine.add_request(rid, prompt, max_tokens, now)
        if until == 20.0:  # an abort mid-run, of whatever is running first
            running = [r for r in (f"r{i}" for i in range(14)) if engine.output_tokens(r)]
            if running:
                engine.abort(running[0], now)
    return engine, now, finished


@pytest.mark.parametrize("policy", ["base", "fix"])
def test_advance_equals_stepping_through_decode_runs_and_livelocks(policy: str) -> None:
    stepped, stepped_now, stepped_done = _drive(policy, lean=False)
    lean, lean_now, lean_done = _drive(policy, lean=True)
    assert lean_now == stepped_now
    assert lean_done == stepped_done
    assert lean.stats == stepped.stats
    for i in range(14):
        assert lean.request_info(f"r{i}") == stepped.request_info(f"r{i}")
    stats = stepped.stats
    assert stats.generation_tokens > 300  # decode runs were stepped
    if policy == "base":  # and the livelock's empty steps were repeated
        assert stats.empty_steps > 100


@pytest.mark.parametrize("sizes", list(SIZES))
@pytest.mark.parametrize("policy", ["base", "fix"])
def test_replayed_passes_give_what_running_every_pass_gives(
    policy: str, sizes: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the reference: no waiting pass is ever replayed, so no step is run lean either (both
    # loops start from a recorded pass); every step goes through every pass
    lean, lean_now, lean_done = _drive(policy, lean=True, sizes=sizes)
    monkeypatch.setattr(Admission, "recorded", lambda self, budget: None)
    full, full_now, full_done = _drive(policy, lean=False, sizes=sizes)
    assert (lean_now, lean_done) == (full_now, full_done)
    assert lean.stats == full.stats
    for i in range(14):
        assert lean.request_info(f"r{i}") == full.request_info(f"r{i}")
    assert full.stats.prefix_cache_queries > 10_000  # the passes polled the queue throughout
