"""The twin follows vLLM flags from an arm's engine arguments: --scheduling-policy, and an ngram
--speculative-config."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stallkit.engine.twin.config import TwinConfig, vllm_sizes


@pytest.mark.parametrize(
    "args", [["--scheduling-policy", "priority"], ["--scheduling-policy=priority"]]
)
def test_the_flag_sets_the_twins_policy(args: list[str]) -> None:
    sizes = vllm_sizes(["--max-num-seqs", "4", *args])
    assert sizes == {"max_num_seqs": 4, "scheduling_policy": "priority"}
    assert TwinConfig(**sizes).scheduling_policy == "priority"


def test_without_it_the_twin_is_first_come_first_served() -> None:
    assert "scheduling_policy" not in vllm_sizes(["--max-num-seqs", "4"])
    assert TwinConfig().scheduling_policy == "fcfs"


def test_a_policy_vllm_does_not_have_is_left_to_vllm_and_refused_by_the_config() -> None:
    assert vllm_sizes(["--scheduling-policy", "lifo"]) == {}
    with pytest.raises(ValidationError):
        TwinConfig(scheduling_policy="lifo")


def test_an_ngram_speculative_config_sets_the_twins_speculative_tokens() -> None:
    args = ["--speculative-config", '{"method":"ngram","num_speculative_tokens":3}']
    sizes = vllm_sizes(args)
    assert sizes == {"num_speculative_tokens": 3}
    assert TwinConfig(**sizes).num_speculative_tokens == 3


def test_a_drafter_model_or_bad_json_is_not_taken() -> None:
    assert vllm_sizes(["--speculative-config", '{"method":"mtp","num_speculative_tokens":1}']) == {}
    assert vllm_sizes(["--speculative-config", "{not json"]) == {}
