"""Corpus case vllm-57841 on the two vLLM releases it names: 0.30 stalls, 0.31 does not.

The case's seven requests, made directly on a twin in each release's own environment (a fresh
process with that release's vLLM): prefixes P and Q stored to the OffloadingConnector's host
tier and evicted from a 24-block pool, then L (P plus 20 tokens), H (P plus 220) and B (Q plus
20) together. On 0.30 H, deferred while P loads, holds no blocks and waits at the head of
`skipped_waiting` ahead of B, whose load is done: nothing runs, nothing is in flight. On 0.31
every request finishes. Skipped where a release's environment is not built
(`kit engine release build 0.30.0`).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.vllm.release_run import run_in_release, twin_script

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

#: the case's requests, one turn each; prints what the scheduler holds when they cannot finish
_SCRIPT = twin_script(
    """P, Q = words("p", 96), words("q", 96)

run([("P", P, 1), ("Q", Q, 1)])
run([("E1", words("e", 190), 1)])
run([("E2", words("f", 190), 1)])
done = run([("L", P + words("l", 20), 4), ("H", P + words("h", 220), 4), ("B", Q + words("b", 20), 4)])
parked = [
    {"id": r.request_id, "status": r.status.name, "computed": r.num_computed_tokens,
     "loaded": r.request_id in sched.finished_recving_kv_req_ids}
    for r in getattr(sched, "skipped_waiting", ())
]
print(json.dumps({"done": done, "running": len(sched.running), "in_flight": engine._kv.next_done_s,
                  "parked": parked, "restores": engine._kv.restores}))
""",
    seconds_per_block=0.02,
)


def _run(release: str) -> dict[str, Any]:
    return run_in_release(release, _SCRIPT)


def test_on_0_30_the_deferred_request_strands_the_finished_load() -> None:
    result = _run("0.30.0")
    assert result["done"] is False and result["running"] == 0 and result["in_flight"] is None
    assert result["parked"] == [
        {"id": "H", "status": "WAITING", "computed": 0, "loaded": False},
        {"id": "B", "status": "WAITING_FOR_REMOTE_KVS", "computed": 96, "loaded": True},
    ]


def test_on_0_31_every_request_finishes() -> None:
    result = _run("0.31.0")
    assert result["done"] is True
    assert isinstance(result["restores"], int) and result["restores"] >= 2
