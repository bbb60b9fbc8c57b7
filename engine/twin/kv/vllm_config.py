"""vLLM's `KVTransferConfig` for a twin: the kit's `--kv-transfer-config`, its host tier sized
in blocks.

OffloadingConnector sizes its host tier in bytes (`cpu_bytes_to_use`), chunks of
`blocks_per_chunk` blocks each rounded up to a memory page. The twin's KV pages are a token
stand-in (no model, a few bytes a block), so bytes from a real engine's command line would
mean a different number of blocks here: the twin sets `cpu_bytes_to_use` to hold
`kv_host_blocks` blocks of its own pages, whatever the command line said. (In vLLM 0.22 and
0.23 that spec takes its bytes per block from the KV pool's tensors, with no page rounding;
the twin finds which in the spec's own code and lays the tensor out for it too.)
SimpleCPUOffloadConnector sizes its host tier against the KV pool's tensor
(`kv_cache_tensors`), which the twin lays out as one layer's. LMCacheConnectorV1's host tier
is the twin's own (`lmcache_tier.py`), sized by `kv_host_blocks` when the driver builds it.
Imports vLLM.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import mmap
from typing import Any

from pydantic import ValidationError

from stallkit.contract.errors import validation_message
from stallkit.engine.errors import EngineError
from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.kv.settings import LMCACHE, SIMPLE, check_kv_transfer

__all__ = ["kv_cache_tensors", "vllm_kv_transfer"]

log = logging.getLogger("stallkit.engine.twin")


def _blocks_per_chunk(extra: dict[str, Any], block_size: int) -> int:
    if "blocks_per_chunk" in extra:
        return max(1, int(extra["blocks_per_chunk"]))
    if "block_size" in extra:  # tokens per chunk, a multiple of the GPU block
        return max(1, int(extra["block_size"]) // block_size)
    return 1


@functools.cache
def _offloading_sizes_from_tensors() -> bool:
    """Whether this vLLM's OffloadingConnector CPU spec takes its bytes per block from the KV
    pool's tensors (0.22, 0.23) instead of its page size rounded up to a memory page."""
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

    try:
        return "kv_cache_tensors" in inspect.getsource(CPUOffloadingSpec.__init__)
    except (OSError, TypeError):  # no source shipped: the later releases' sizing
        return False


def _from_tensors(raw: dict[str, Any]) -> bool:
    """Whether the connector sizes its host tier from the KV pool's tensors."""
    if raw.get("kv_connector") == SIMPLE:
        return True
    return raw.get("kv_connector") == "OffloadingConnector" and _offloading_sizes_from_tensors()


def _host_bytes(
    raw: dict[str, Any], extra: dict[str, Any], config: TwinConfig, page_bytes: int
) -> int:
    """`cpu_bytes_to_use` for a host tier of `config.kv_host_blocks` blocks."""
    if raw.get("kv_connector") == SIMPLE:  # blocks = GPU blocks * bytes // the GPU pool's bytes
        return config.kv_host_blocks * page_bytes
    per_chunk = _blocks_per_chunk(extra, config.block_size)
    if _offloading_sizes_from_tensors():  # chunks = bytes // (the pool's bytes per block * n)
        return max(1, config.kv_host_blocks // per_chunk) * page_bytes * per_chunk
    chunk_bytes = -(-page_bytes * per_chunk // mmap.PAGESIZE) * mmap.PAGESIZE
    chunks = max(1, config.kv_host_blocks // per_chunk)
    return chunks * chunk_bytes


def kv_cache_tensors(config: TwinConfig, page_bytes: int, pool: int) -> list[Any]:
    """The KV pool's tensors, as a GPU worker would lay them out: one for the twin's one layer
    where the connector sizes its host tier from it (SimpleCPUOffloadConnector; on vLLM 0.22
    and 0.23 OffloadingConnector too), else none."""
    from vllm.v1.kv_cache_interface import KVCacheTensor

    if not _from_tensors(config.kv_transfer_config or {}):
        return []
    size = page_bytes * pool
    names = {f.name for f in dataclasses.fields(KVCacheTensor)}
    if "layers" not in names:  # vLLM 0.22, 0.23: the layers that share the tensor, no strides
        older: dict[str, Any] = {"size": size, "shared_by": ["layer"]}
        return [KVCacheTensor(**older)]
    return [KVCacheTensor(size=size, layers=["layer"], layer_stride=size, block_stride=page_bytes)]


def vllm_kv_transfer(config: TwinConfig, page_bytes: int) -> Any:
    """The `KVTransferConfig` of `config.kv_transfer_config`, its host tier set to
    `config.kv_host_blocks` blocks of `page_bytes` each; EngineError when vLLM refuses it."""
    from vllm.config import KVTransferConfig

    raw = dict(config.kv_transfer_config or {})
    check_kv_transfer(raw)
    extra = dict(raw.get("kv_connector_extra_config") or {})
    if raw.get("kv_connector") == LMCACHE:  # its host tier is the twin's (kv_host_blocks)
        from stallkit.engine.twin.kv.lmcache_config import lmcache_extra, prepare_lmcache

        prepare_lmcache()
        extra = lmcache_extra(extra, config.kv_host_blocks)
    elif "cpu_bytes_to_use" in extra:
        log.info("twin: the host tier is [twin] kv_host_blocks, not cpu_bytes_to_use")
    if raw.get("kv_connector") != LMCACHE:
        extra.pop("cpu_bytes_to_use_per_rank", None)
        extra["cpu_bytes_to_use"] = _host_bytes(raw, extra, config, page_bytes)
    raw["kv_connector_extra_config"] = extra
    hint = "check the JSON against vLLM's KVTransferConfig fields"
    try:
        return KVTransferConfig(**raw)
    except ValidationError as exc:
        message = validation_message(exc, default="")
        raise EngineError(f"vLLM refused --kv-transfer-config ({message})", hint) from None
    except (TypeError, ValueError) as exc:  # an unknown field, vLLM's own checks
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise EngineError(f"vLLM refused --kv-transfer-config ({first})", hint) from None
