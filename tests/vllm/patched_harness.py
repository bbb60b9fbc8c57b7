"""A real vLLM scheduler driven in-process without a model: the patched engine's test bench.

Builds the scheduler the way the twin does (`stallkit.engine.twin.build`: vLLM's own configs, no
weights, a KV pool of a chosen size), and steps the scheduler the way vLLM's engine core does: `schedule()`, then
`update_from_output()` with one sampled token for every request whose scheduled tokens
reached its end. The scheduler's clock is a fake one that the caller advances per step.
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from stallkit.engine.twin.build import make_scheduler as build_scheduler
from stallkit.engine.twin.config import PATCHED_SCHEDULER, TwinConfig

BLOCK = 16
_VLLM_MODULES = (
    "torch",
    "vllm.config",
    "vllm.sampling_params",
    "vllm.utils.hashing",
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.kv_cache_interface",
    "vllm.v1.outputs",
    "vllm.v1.request",
    "vllm.v1.structured_output",
    "stallkit.engine.vllm_plugin.scheduler",
)


def import_vllm() -> None:
    """Import the vLLM modules the bench uses once, without their import-time deprecations."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in _VLLM_MODULES:
            importlib.import_module(name)


class StepClock:
    """The plugin's clock: time moves only when the test says so."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


@dataclass(frozen=True)
class Step:
    """What one scheduler step did."""

    turn: str
    contended: bool
    scheduled_tokens: int
    preemptions: int
    running: int
    waiting: int


def make_scheduler(
    model_dir: Path,
    policy: str,
    share: float = 0.4,
    max_num_seqs: int = 2,
    num_blocks: int = 8,
    asynchronous: bool = False,
    extra: dict[str, Any] | None = None,
) -> Any:
    """A PatchedScheduler (or the async one) over `num_blocks` usable blocks of 16 tokens.

    The synchronous one is built by the twin's product code (`stallkit.engine.twin.build`), the async
    one (which the twin does not run) here, over the same configs.
    """
    import_vllm()
    section: dict[str, Any] = {"policy": policy, "prefill_compute_share": share, **(extra or {})}
    config = TwinConfig(
        scheduler_cls=PATCHED_SCHEDULER,
        additional_config={"patched_scheduler": section},
        model_name=str(model_dir),
        max_num_seqs=max_num_seqs,
        num_blocks=num_blocks,
        block_size=BLOCK,
        max_num_batched_tokens=128,
        max_model_len=num_blocks * BLOCK,
    )
    scheduler = _make_async(model_dir, config) if asynchronous else build_scheduler(config)
    scheduler.clock = StepClock()
    return scheduler


def _make_async(model_dir: Path, config: TwinConfig) -> Any:
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    from stallkit.engine.vllm_plugin.scheduler import AsyncPatchedScheduler

    max_len = config.max_model_len
    scheduler_config = SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_model_len=max_len,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        async_scheduling=True,
    )
    model_config = ModelConfig(
        model=str(model_dir), dtype="float32", seed=0, skip_tokenizer_init=True,
        max_model_len=max_len,
    )  # fmt: skip
    cache_config = CacheConfig(block_size=BLOCK, enable_prefix_caching=True)
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        additional_config=config.additional_config,
    )
    # vLLM's pool keeps one null block: ask for one more than the usable count
    cache_config.num_gpu_blocks = config.num_blocks + 1
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv_cache_config = KVCacheConfig(
        num_blocks=config.num_blocks + 1,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    return AsyncPatchedScheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=BLOCK,
        log_stats=True,
    )


def make_request(request_id: str, prompt_tokens: int, max_tokens: int, first_token: int) -> Any:
    """A request of distinct token ids (no shared prefix with the others)."""
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256)
    return Request(
        request_id,
        list(range(first_token, first_token + prompt_tokens)),
        SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        None,
        block_hasher=get_request_block_hasher(BLOCK, sha256),
    )


def step(scheduler: Any, duration_s: float = 1.0) -> Step:
    """One engine step that takes `duration_s` on the scheduler's clock."""
    from vllm.v1.outputs import ModelRunnerOutput

    output = scheduler.schedule()
    turn, contended = scheduler.turn
    scheduler.clock.now_s += duration_s
    ids = list(output.num_scheduled_tokens)
    sampled = []
    for request_id in ids:
        request = scheduler.requests[request_id]
        # num_computed_tokens already counts this step's tokens
        done = request.num_computed_tokens >= request.num_tokens
        sampled.append([7] if done else [])
    index: dict[str, Any] = {}
    if "req_id_to_index" in {f.name for f in fields(ModelRunnerOutput)}:  # gone in 0.34
        index["req_id_to_index"] = {rid: i for i, rid in enumerate(ids)}
    runner_output = ModelRunnerOutput(req_ids=ids, sampled_token_ids=sampled, **index)
    scheduler.update_from_output(output, runner_output)
    running, waiting = scheduler.get_request_counts()
    return Step(
        turn,
        contended,
        output.total_num_scheduled_tokens,
        len(output.preempted_req_ids or ()),
        running,
        waiting,
    )


def prepare_full_slots(scheduler: Any, decode_max_tokens: int = 40) -> None:
    """The regression case `full-slots` of `kit sim trace`, on vLLM.

    Two decodes of 61 prompt tokens take the whole 8-block pool (three free slots left in
    each one's fourth block) and the two running slots; once both have their first token,
    two more requests (53 prompt tokens, 8 out) wait behind the full slots.
    """
    for index in (1, 2):
        scheduler.add_request(
            make_request(f"decode-{index}", 4 * BLOCK - 3, decode_max_tokens, 1000 * index)
        )
    step(scheduler)
    for index in (1, 2):
        scheduler.add_request(make_request(f"conv{index}-turn2", 53, 8, 10_000 * index))
