"""Corpus case vllm-57104 on the two vLLM releases it names: 0.30 stalls, 0.31 does not.

The case's requests, made directly on a twin with 3 speculative tokens (ngram) in each
release's own environment: two 12-block prompts computed, stored to the OffloadingConnector's
host tier and evicted from a 24-block pool, then both again together: two async loads that fill
the pool. On 0.30 the first to land needs a 13th block for its speculative slots and stops the
pass ahead of the other load: nothing runs, nothing is in flight. Without speculative tokens,
and on 0.31, both finish. Skipped where a release's environment is not built
(`kit engine release build 0.30.0`).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.vllm.release_run import run_in_release, twin_script

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

#: the case's requests; prints what the scheduler holds when they cannot finish
_SCRIPT = twin_script(
    """A, B = words("a", 192), words("b", 192)

run([("A0", A, 1)])
run([("B0", B, 1)])
run([("E1", words("e", 190), 1)])
run([("E2", words("f", 190), 1)])
done = run([("A1", A, 2), ("B1", B, 2)])
print(json.dumps({
    "done": done, "running": len(sched.running), "in_flight": engine._kv.next_done_s,
    "free": sched.kv_cache_manager.block_pool.get_num_free_blocks(),
    "parked": [(r.request_id, r.status.name) for r in getattr(sched, "skipped_waiting", ())],
}))
""",
    seconds_per_block=0.02,
    extra=", num_speculative_tokens=int(sys.argv[1])",
)


def _run(release: str, spec_tokens: str) -> dict[str, Any]:
    return run_in_release(release, _SCRIPT, spec_tokens)


def test_on_0_30_the_first_load_cannot_take_its_speculative_block() -> None:
    result = _run("0.30.0", "3")
    assert result["done"] is False and result["running"] == 0 and result["in_flight"] is None
    assert result["free"] == 0
    assert result["parked"] == [["A1", "WAITING"], ["B1", "WAITING_FOR_REMOTE_KVS"]]


def test_on_0_30_without_speculative_tokens_both_finish() -> None:
    assert _run("0.30.0", "0")["done"] is True


def test_on_0_31_both_finish() -> None:
    assert _run("0.31.0", "3")["done"] is True
