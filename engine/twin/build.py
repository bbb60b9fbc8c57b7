"""vLLM's configs and scheduler for a twin: the real classes, a KV pool of the twin's size.

No weights, no model runner: a `ModelConfig` needs a model's `config.json`, so a small Llama
configuration (no weights, no tokenizer) is written once per `max_model_len` under the system
temporary directory. The KV cache config is one full-attention group over `num_blocks + 1`
blocks (vLLM keeps one as its null block), or, for a layer layout (`TwinConfig.layers`), the
groups vLLM's own planning builds for it (`stallkit.engine.twin.kvgroups`). The scheduler class is imported by name (after an
overlay, if any, is installed); it must be a subclass of vLLM's v1 `Scheduler` or take its
constructor. With async scheduling on, it is the named class's async counterpart
(`TwinConfig.scheduler_class_name`) over a config whose `async_scheduling` is on. Imports
vLLM: called only where a twin runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from stallkit.engine.errors import EngineError
from stallkit.engine.install import VLLM_MISSING
from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.overlay import install_overlay

__all__ = [
    "import_vllm",
    "kv_cache_usage",
    "make_scheduler",
    "quiet_vllm_logging",
    "route_vllm_logging",
    "scheduler_class",
    "vllm_importable",
]


_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": 1 << 25,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "rms_norm_eps": 1e-6,
    "dtype": "float32",
}


class _Forward(logging.Handler):
    """vLLM's log records, handed to the twin arm's engine log."""

    def __init__(self, target: logging.Logger) -> None:
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= self.target.getEffectiveLevel():
            self.target.handle(record)


def quiet_vllm_logging() -> None:
    """In a twin's worker process, before vLLM is imported: vLLM's log lines go nowhere of
    their own (no handler on stdout); `route_vllm_logging` sends them to the arm's log."""
    os.environ["VLLM_CONFIGURE_LOGGING"] = "0"
    # torch's own warning that triton is missing (the twin runs no kernels): not the user's news
    logging.getLogger("torch._library.triton").setLevel(logging.ERROR)
    vllm_log = logging.getLogger("vllm")
    vllm_log.propagate = False
    if not vllm_log.handlers:
        vllm_log.addHandler(logging.NullHandler())


def route_vllm_logging(target: logging.Logger) -> None:
    """vLLM's log records from now on go to `target` (the arm's engine log) as well, where
    `quiet_vllm_logging` cut them off (elsewhere they reach the root logger as before)."""
    vllm_log = logging.getLogger("vllm")
    if vllm_log.propagate:
        return
    for handler in list(vllm_log.handlers):
        if isinstance(handler, _Forward):
            vllm_log.removeHandler(handler)
    vllm_log.addHandler(_Forward(target))


def vllm_importable() -> bool:
    """Whether vLLM is installed here (found, not imported: that takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def import_vllm() -> Any:
    """The vLLM module, or EngineError naming the extra to install."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return importlib.import_module("vllm")
    except ImportError as exc:
        raise EngineError(f"vLLM is not importable ({exc})", VLLM_MISSING) from exc


def _model_dir(max_model_len: int) -> Path:
    """A weightless model directory whose config allows `max_model_len` positions."""
    root = Path(tempfile.gettempdir()) / f"stallkit-twin-model-{os.getuid()}-{max_model_len}"
    config = root / "config.json"
    if not config.is_file():
        root.mkdir(parents=True, exist_ok=True)
        text = json.dumps({**_LLAMA, "max_position_embeddings": max_model_len}, indent=1)
        partial = root / f"config.json.{os.getpid()}"
        partial.write_text(text, encoding="utf-8")
        partial.replace(config)  # atomic: another worker may be writing the same file
    return root


def scheduler_class(name: str, *, allow_async: bool = False) -> type[Any]:
    """The vLLM scheduler class `module.Class` (or `module:Class`); EngineError when it is
    not there, not a scheduler, or (unless `allow_async`) an async-scheduling one."""
    module_name, sep, attr = name.replace(":", ".").rpartition(".")
    if not sep or not module_name:
        raise EngineError(
            f"scheduler class {name!r} is not module.Class", "e.g. twin:mypkg.sched:MyScheduler"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EngineError(
            f"cannot import {module_name}, the scheduler class's module: {exc}",
            "check the module name and that it imports here (a twin: arm can also take it from a "
            "kit's [twin] overlay)",
        ) from exc
    except Exception as exc:  # the module itself fails (a syntax error, an error on import)
        raise EngineError(
            f"importing {module_name}, the scheduler class's module, raised {type(exc).__name__}: {exc}",
            "fix the module (python -c 'import MODULE' shows the whole traceback)",
        ) from exc
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise EngineError(f"{module_name} has no class {attr}", "name a class in that module")
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.interface import SchedulerInterface

    if not issubclass(cls, SchedulerInterface):
        raise EngineError(f"{name} is not a vLLM scheduler", "name a v1 SchedulerInterface class")
    if issubclass(cls, AsyncScheduler) and not allow_async:
        raise EngineError(
            f"{name} is an async-scheduling class; the twin steps one output at a time",
            "name its synchronous counterpart (e.g. PatchedScheduler, Scheduler), or set the "
            'kit\'s [twin] async_scheduling = "on"',
        )
    return cls


def kv_cache_usage(sched: Any) -> float:
    """The KV pool's usage, 0 to 1, as the scheduler reports it (vLLM 0.22 and 0.23 have no
    `get_kv_cache_usage`: their KV cache manager's `usage`)."""
    usage = getattr(sched, "get_kv_cache_usage", None)
    return float(usage() if usage is not None else sched.kv_cache_manager.usage)


def _ngram(config: TwinConfig, model_config: Any) -> Any:
    """vLLM's SpeculativeConfig for ngram drafts of `config.num_speculative_tokens` tokens."""
    from vllm.config import ParallelConfig, SpeculativeConfig

    return SpeculativeConfig(
        method="ngram",
        num_speculative_tokens=config.num_speculative_tokens,
        prompt_lookup_max=config.num_speculative_tokens,
        prompt_lookup_min=1,
        target_model_config=model_config,
        target_parallel_config=ParallelConfig(),
    )


def make_scheduler(config: TwinConfig) -> Any:
    """The twin's scheduler: `config.scheduler_cls` over vLLM's configs at the twin's sizes."""
    if config.overlay is not None:
        install_overlay(config.overlay)
    import_vllm()
    cls = scheduler_class(config.scheduler_class_name, allow_async=config.async_on)
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import init_none_hash
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    scheduler_config = SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_model_len=config.max_model_len,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        async_scheduling=False,
        scheduler_reserve_full_isl=config.reserve_full_isl,
        policy=config.scheduling_policy,
    )
    model_config = ModelConfig(
        model=str(_model_dir(config.max_model_len)),
        dtype="float32",
        seed=0,
        skip_tokenizer_init=True,
        max_model_len=config.max_model_len,
        served_model_name=config.model_name,
    )
    cache_config = CacheConfig(
        block_size=config.block_size, enable_prefix_caching=config.enable_prefix_caching
    )
    spec = FullAttentionSpec(
        block_size=config.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    connector: dict[str, Any] = {}
    if config.kv_transfer_config is not None:
        from stallkit.engine.twin.kv.vllm_config import vllm_kv_transfer

        connector["kv_transfer_config"] = vllm_kv_transfer(config, spec.page_size_bytes)
    if config.num_speculative_tokens:
        connector["speculative_config"] = _ngram(config, model_config)
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        additional_config=dict(config.additional_config),
        **connector,
    )
    if config.async_on:  # vLLM's CPU platform turned it off (platforms/cpu.py); the twin
        # stands for a GPU engine, where it stays on (read by max_concurrent_batches)
        scheduler_config.async_scheduling = True
    pool = config.num_blocks + 1  # one more for vLLM's null block
    cache_config.num_gpu_blocks = pool
    tensors: list[Any] = []
    if config.kv_transfer_config is not None:
        from stallkit.engine.twin.kv.vllm_config import kv_cache_tensors

        tensors = kv_cache_tensors(config, spec.page_size_bytes, pool)
    if config.layers is None:
        kv_cache_config = KVCacheConfig(
            num_blocks=pool,
            kv_cache_tensors=tensors,
            kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
        )
    else:
        from stallkit.engine.twin.kvgroups import layered_kv_cache_config

        kv_cache_config = layered_kv_cache_config(config, vllm_config, pool)
    init_none_hash(sha256)
    try:
        return cls(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=config.block_size,
            log_stats=True,
        )
    except Exception as exc:  # a scheduler's constructor may raise anything
        raise EngineError(
            f"{config.scheduler_cls} refused the twin's configuration "
            f"({type(exc).__name__}: {exc})",
            "check the kit's [twin] additional_config (or [patched]) for this scheduler",
        ) from exc
