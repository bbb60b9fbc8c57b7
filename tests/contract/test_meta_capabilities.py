"""meta.json records the engine's capabilities; a meta.json written before them still reads."""

from __future__ import annotations

import json

from stallkit.contract.meta import ArmMeta, EngineCapabilities

OLD_META = {"arm": "base", "spec": "patched:base", "kind": "patched", "end_reason": "duration"}


def test_an_old_meta_without_capabilities_reads_as_a_generic_engine() -> None:
    meta = ArmMeta.model_validate(OLD_META)
    assert meta.capabilities == EngineCapabilities()
    assert meta.capabilities.engine_log and meta.capabilities.restore_admission
    assert meta.capabilities.gpu is None and not meta.capabilities.step_counter


def test_the_starting_meta_records_the_capabilities_and_updates_keep_them() -> None:
    caps = EngineCapabilities(step_counter=True, restore_admission=False, gpu=True)
    meta = ArmMeta.starting(
        arm="base",
        spec="vllm/vllm-openai:v0.32.0",
        kind="docker",
        clock="wall",
        capabilities=caps,
        seed=1,
        time_scale=1.0,
        planned_duration_s=60.0,
        started_at="2026-01-01T00:00:00+00:00",
    )
    ended = meta.update(end_reason="duration", wall_s=60.0)
    assert ended.capabilities == caps
    assert ArmMeta.model_validate(json.loads(ended.model_dump_json())).capabilities == caps
