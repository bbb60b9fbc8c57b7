"""vLLM #45388's scenario on the twin, run by a release's own interpreter (no pytest there).

`python twin_release_harness.py [CONNECTOR]` in a `twin@RELEASE` environment prints one JSON
line: what the twin (that release's scheduler, its OffloadingConnector or the CONNECTOR named,
simulated byte mover) holds after two
turns whose prefixes were evicted to the host tier come back together. The first needs 20
blocks of prefix and 50 blocks of new prompt, the second 70 of prefix and 3 new, over 96
blocks: each fits the pool on its own when admitted, so a scheduler without #44560's
reservation parks both as async loads (90 blocks held); the first, at the head of the queue,
then needs 50 blocks with 6 free, and the second, which would fit, is never reached.
"""

from __future__ import annotations

import json
import sys
from typing import Any

#: tokens per block; the pool and the two turns' sizes in blocks (see the module's docstring)
BLOCK = 16
POOL = 96
STEPS = 3000


def main(connector: str = "OffloadingConnector") -> dict[str, Any]:
    import vllm

    from stallkit.engine.twin.config import TwinConfig
    from stallkit.engine.twin.core import TwinEngine

    config = TwinConfig(
        num_blocks=POOL, block_size=BLOCK, max_num_seqs=8, max_num_batched_tokens=512,
        max_model_len=4096, kv_host_blocks=1024, skip_empty_steps=False,
        kv_transfer_config={"kv_connector": connector, "kv_role": "kv_both"},
    )  # fmt: skip
    engine = TwinEngine(config)
    clock = [0.0]

    def run(steps: int) -> None:
        for _ in range(steps):
            if not engine.has_work():
                return
            clock[0] += engine.step(clock[0]).duration_s

    def words(tag: str, blocks: int) -> list[str]:
        return [f"{tag}{i}" for i in range(blocks * BLOCK)]

    first, second = words("a", 20), words("b", 70)
    for rid, prompt in (("a0", first), ("b0", second), ("evict", words("f", 90))):
        engine.add_request(rid, prompt, 1, clock[0])
        run(STEPS)
        for _ in range(100):  # idle steps: the stores to the host tier land
            clock[0] += engine.step(clock[0]).duration_s
    engine.add_request("a1", first + words("x", 50), 1, clock[0])
    engine.add_request("b1", second + words("y", 3), 1, clock[0])
    run(STEPS // 2)
    sched = engine._sched  # vLLM's own scheduler: its queues are what the report shows
    halfway = [
        (r.request_id, r.num_computed_tokens, r.status.name) for r in sched.requests.values()
    ]
    run(STEPS // 2)

    def state(rid: str) -> str | None:
        info = engine.request_info(rid)
        return None if info is None else info.state

    return {
        "vllm": vllm.__version__,
        "unfinished": sorted(r for r in ("a1", "b1") if state(r) != "finished"),
        "running": len(sched.running),
        "free_blocks": sched.kv_cache_manager.block_pool.get_num_free_blocks(),
        "loads_done": engine._kv.restores,
        "moved": halfway
        != [(r.request_id, r.num_computed_tokens, r.status.name) for r in sched.requests.values()],
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(*sys.argv[1:2])), flush=True)
