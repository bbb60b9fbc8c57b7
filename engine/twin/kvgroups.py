"""vLLM's KV cache groups for a twin's layer layout, built by vLLM's own functions.

A layout (`TwinConfig.layers`) becomes one `KVCacheSpec` per layer (full attention or a
sliding window, at the twin's block size and a one-float page), and vLLM 0.32's engine-core
path turns them into the scheduler's `KVCacheConfig`: the KV cache layout resolved
(`resolve_kv_cache_layout`, the default backends' preference), the groups and the pool planned
(`get_kv_cache_configs`, with `num_gpu_blocks_override` at the twin's pool, so vLLM's own
check that one `max_model_len` request fits runs too), then the scheduler's view of them
(`generate_scheduler_kv_cache_config`). Imports vLLM: called only where a twin runs.
"""

from __future__ import annotations

from typing import Any

from stallkit.engine.errors import EngineError
from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.layers import Layer, parse_layers

__all__ = ["layer_specs", "layered_kv_cache_config"]


def layer_specs(layers: tuple[Layer, ...], block_size: int) -> dict[str, Any]:
    """vLLM's per-layer `KVCacheSpec`s of `layers`, named as vLLM names a decoder's layers."""
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    page: dict[str, Any] = {
        "block_size": block_size,
        "num_kv_heads": 1,
        "head_size": 1,
        "dtype": torch.float32,
    }
    specs: dict[str, Any] = {}
    for i, layer in enumerate(layers):
        name = f"model.layers.{i}.self_attn.attn"
        if layer.window is None:
            specs[name] = FullAttentionSpec(**page)
        else:
            specs[name] = SlidingWindowSpec(**page, sliding_window=layer.window)
    return specs


def layered_kv_cache_config(config: TwinConfig, vllm_config: Any, pool: int) -> Any:
    """The scheduler's `KVCacheConfig` for `config.layers` over `pool` blocks (null block
    included); EngineError, naming the key, when vLLM refuses the layout or this release has
    not the functions."""
    assert config.layers is not None
    specs = layer_specs(parse_layers(config.layers), config.block_size)
    try:
        from vllm.v1.attention.backends.utils import (
            get_supported_kv_cache_layouts,
            resolve_kv_cache_layout,
        )
        from vllm.v1.core.kv_cache_utils import (
            generate_scheduler_kv_cache_config,
            get_kv_cache_configs,
        )
    except ImportError as exc:
        raise EngineError(
            f"[twin] layers: this vLLM has not the KV cache planning the twin calls ({exc})",
            "drop [twin] layers for this release (it is built with vLLM 0.32's functions)",
        ) from exc
    layouts = [[layout.name for layout in get_supported_kv_cache_layouts([])]]
    vllm_config.cache_config.num_gpu_blocks_override = pool
    memory = pool * sum(spec.page_size_bytes for spec in specs.values())
    try:
        resolve_kv_cache_layout(vllm_config, layouts, specs.values())
        configs = get_kv_cache_configs(vllm_config, [specs], [memory])
    except (ValueError, AssertionError, NotImplementedError) as exc:
        raise EngineError(
            f"vLLM refused the twin's [twin] layers {config.layers!r} over {pool - 1} blocks "
            f"({type(exc).__name__}: {exc})",
            "raise num_blocks (--num-gpu-blocks-override) or lower max_model_len, or change "
            "the layout",
        ) from exc
    return generate_scheduler_kv_cache_config(configs)
