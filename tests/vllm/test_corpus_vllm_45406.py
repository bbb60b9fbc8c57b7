"""Corpus case vllm-45406 on the two vLLM releases it names: 0.30 stalls, 0.31 does not.

The case's requests, made directly on a twin with vLLM's priority policy in each release's own
environment: prefix Q stored to the OffloadingConnector's host tier and evicted from a 24-block
pool, W (200 tokens, 150 out) decoding, then B (Q plus 20 tokens) admitted as a 1.2 s async
load. W runs out of blocks while B loads and is preempted; on 0.30 W, older, heads the waiting
pass and cannot fit beside B's blocks, and B is never promoted: nothing runs, nothing is in
flight. On 0.31 (and under FCFS on 0.30) both finish. Skipped where a release's environment is
not built (`kit engine release build 0.30.0`).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.vllm.release_run import run_in_release, twin_script

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

#: the case's requests; prints what the scheduler holds when they cannot finish
_SCRIPT = twin_script(
    """Q = words("q", 96)

run([("Q", Q, 1)])
run([("E1", words("e", 190), 1)])
run([("E2", words("f", 190), 1)])
engine.add_request("W", words("w", 200), 150, t)
while not any(r.request_id == "W" and r.num_computed_tokens >= 210 for r in sched.running):
    t = engine.advance(t, t + 0.01).now_s
done = run([("B", Q + words("b", 20), 4)])
print(json.dumps({
    "done": done, "running": len(sched.running), "in_flight": engine._kv.next_done_s,
    "waiting": [(r.request_id, r.status.name) for r in sched.waiting],
    "parked": [(r.request_id, r.status.name) for r in getattr(sched, "skipped_waiting", ())],
}))
""",
    seconds_per_block=0.2,
    extra=", scheduling_policy=sys.argv[1]",
)


def _run(release: str, policy: str) -> dict[str, Any]:
    return run_in_release(release, _SCRIPT, policy)


def test_on_0_30_the_preempted_request_strands_the_parked_load() -> None:
    result = _run("0.30.0", "priority")
    assert result["done"] is False and result["running"] == 0 and result["in_flight"] is None
    assert result["waiting"] == [["W", "PREEMPTED"]]
    assert result["parked"] == [["B", "WAITING_FOR_REMOTE_KVS"]]


def test_on_0_30_first_come_first_served_finishes() -> None:
    assert _run("0.30.0", "fcfs")["done"] is True


def test_on_0_31_the_priority_policy_finishes() -> None:
    assert _run("0.31.0", "priority")["done"] is True
