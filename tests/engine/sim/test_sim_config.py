"""SimConfig / CostModel validation: impossible values fail with clear pydantic errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stallkit.engine.sim.config import CostModel, SimConfig


def test_defaults_are_the_restore_stall_sizes() -> None:
    config = SimConfig()
    assert (config.max_num_seqs, config.num_blocks, config.block_size) == (4, 319, 896)
    assert config.prefill_compute_share == 0.4
    assert config.host_tier_blocks > 0
    assert config.policy == "base"
    assert config.model_name == "stallkit-sim"
    assert config.max_model_len == 131072
    assert config.num_gpus == 2


def test_cost_defaults_give_about_300_decode_tokens_per_second_at_four_sequences() -> None:
    cost = CostModel()
    step_s = cost.step_overhead_s + cost.decode_s(4, 4 * 70_000)
    assert 250 < 4 / step_s < 350
    prefill_rate = 8192 / (cost.step_overhead_s + cost.prefill_s(8192, 80_000))
    assert 1000 < prefill_rate < 6000
    short = 8192 / cost.prefill_s(8192, 0)
    assert short > prefill_rate  # long-context prefill is slower


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("num_blocks", 0, "greater than 0"),
        ("block_size", 0, "greater than 0"),
        ("max_num_seqs", -1, "greater than 0"),
        ("prefill_compute_share", 1.0, "strictly between 0 and 1"),
        ("prefill_compute_share", 1.5, "strictly between 0 and 1"),
        ("prefill_compute_share", -0.2, "strictly between 0 and 1"),
        ("restore_max_wait_s", -1.0, "greater than or equal to 0"),
        ("host_tier_blocks", -5, "greater than or equal to 0"),
        ("idle_tick_s", 0.0, "greater than 0"),
        ("policy", "turbo", "'base' or 'fix'"),
    ],
)
def test_impossible_values_are_rejected(field: str, value: object, words: str) -> None:
    with pytest.raises(ValidationError) as info:
        SimConfig.model_validate({field: value})
    message = str(info.value)
    assert field in message
    assert words in message


def test_share_zero_means_off_and_is_valid() -> None:
    assert SimConfig(prefill_compute_share=0).prefill_compute_share == 0


def test_nested_cost_and_unknown_keys_from_a_toml_like_dict() -> None:
    config = SimConfig.model_validate({"policy": "fix", "cost": {"restore_per_block_s": 0.5}})
    assert config.cost.restore_per_block_s == 0.5
    with pytest.raises(ValidationError, match="restore_per_block_s"):
        SimConfig.model_validate({"cost": {"restore_per_block_s": -1}})
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        SimConfig.model_validate({"num_block": 3})


def test_config_is_frozen() -> None:
    config = SimConfig()
    with pytest.raises(ValidationError):
        config.num_blocks = 5  # type: ignore[misc]
