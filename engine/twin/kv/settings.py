"""The `--kv-transfer-config` a twin takes, read from a vLLM command line and checked.

Pure (no vLLM import), so a kit naming a connector the twin cannot run is refused when it is
planned, in one line. The twin runs the connectors in `SUPPORTED_CONNECTORS`: their scheduler
half is vLLM's, their byte mover the twin's link (`stallkit.engine.twin.kv.link`).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from typing import Any

from stallkit.engine.errors import EngineError

__all__ = [
    "LMCACHE",
    "LMCACHE_INSTALL",
    "SIMPLE",
    "SUPPORTED_CONNECTORS",
    "check_host_tier",
    "check_kv_transfer",
    "host_capacity",
    "kv_transfer_from_args",
    "lmcache_installed",
]

#: vLLM's SimpleCPUOffloadConnector (its copy thread and CUDA events simulated)
SIMPLE = "SimpleCPUOffloadConnector"
#: connectors whose byte mover the twin simulates
#: vLLM's wrapper of LMCache's connector (its scheduler half from the lmcache package)
LMCACHE = "LMCacheConnectorV1"
#: connectors whose byte mover the twin simulates
SUPPORTED_CONNECTORS = ("OffloadingConnector", SIMPLE, LMCACHE)
#: how to install what LMCacheConnectorV1's scheduler half imports (lmcache's own requirements
#: pull CUDA packages and pins that conflict with vLLM's CPU build)
LMCACHE_INSTALL = "pip install --no-deps lmcache==0.5.6 sortedcontainers aiofile caio"
_LMCACHE_MODULES = ("lmcache", "sortedcontainers", "aiofile", "caio")
_FLAGS = ("--kv-transfer-config", "--kv_transfer_config")
_HINT = (
    "the twin runs --kv-transfer-config "
    '\'{"kv_connector":"OffloadingConnector","kv_role":"kv_both"}\' (vLLM\'s CPU offloading) '
    "SimpleCPUOffloadConnector or LMCacheConnectorV1; run other connectors on a real engine"
)


def kv_transfer_from_args(engine_args: Sequence[str]) -> dict[str, Any] | None:
    """The `--kv-transfer-config` JSON object of a vLLM command line, checked (None: absent).

    EngineError (one line, a hint) when it is not a JSON object or names a connector the twin
    cannot run.
    """
    args = list(engine_args)
    text: str | None = None
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in _FLAGS:
            text = value if eq else args[i + 1] if i + 1 < len(args) else ""
    if text is None:
        return None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EngineError(f"--kv-transfer-config is not JSON ({exc.msg})", _HINT) from exc
    if not isinstance(config, dict):
        raise EngineError("--kv-transfer-config is not a JSON object", _HINT)
    check_kv_transfer(config)
    return config


def check_kv_transfer(config: dict[str, Any]) -> None:
    """EngineError unless the twin can run this kv-transfer config's connector."""
    name = config.get("kv_connector")
    if config.get("kv_connector_module_path"):
        raise EngineError(
            f"the twin cannot run an out-of-tree KV connector ({name!r} from "
            f"{config['kv_connector_module_path']})",
            _HINT,
        )
    if name not in SUPPORTED_CONNECTORS:
        raise EngineError(f"the twin cannot run KV connector {name!r}", _HINT)
    if not config.get("kv_role"):
        raise EngineError(
            "--kv-transfer-config has no kv_role", 'add "kv_role":"kv_both" (vLLM requires one)'
        )
    extra = config.get("kv_connector_extra_config", {})
    if not isinstance(extra, dict):
        raise EngineError("kv_connector_extra_config is not a JSON object", _HINT)
    if name == SIMPLE:
        _check_simple(extra)
        return
    if name == LMCACHE:
        _check_lmcache(extra)
        return
    spec = extra.get("spec_name", "CPUOffloadingSpec")
    if spec != "CPUOffloadingSpec" or extra.get("spec_module_path"):
        raise EngineError(
            f"the twin runs OffloadingConnector's CPUOffloadingSpec only, not {spec!r}",
            "drop spec_name and spec_module_path from kv_connector_extra_config",
        )


def _check_simple(extra: dict[str, Any]) -> None:
    """EngineError unless SimpleCPUOffloadConnector's host tier is CPU memory (the twin has no
    disk tier)."""
    backend = extra.get("kv_offload_backend", "cpu")
    if backend != "cpu":
        raise EngineError(
            f"the twin runs SimpleCPUOffloadConnector's CPU backend only, not {backend!r}",
            "drop kv_offload_backend from kv_connector_extra_config",
        )


def lmcache_installed() -> bool:
    """Whether what LMCacheConnectorV1's scheduler half imports is installed (not imported)."""
    return all(importlib.util.find_spec(module) is not None for module in _LMCACHE_MODULES)


#: LMCache settings that take the lookup or the loads out of the scheduler's process
_LMCACHE_REFUSED = {
    "use_native": "vLLM's own copy of the adapter",
    "lmcache.enable_async_loading": "asynchronous loads",
    "lmcache.external_lookup_client": "an external lookup client",
    "lmcache.enable_p2p": "peer-to-peer sharing",
    "lmcache.enable_pd": "prefill/decode disaggregation",
}


def _check_lmcache(extra: dict[str, Any]) -> None:
    """EngineError unless lmcache is installed and the config keeps LMCache's synchronous
    loads and its lookup in the scheduler (the twin simulates its worker from the metadata)."""
    if not lmcache_installed():
        raise EngineError(
            f"{LMCACHE} needs the lmcache package, which is not installed",
            f"install it with: {LMCACHE_INSTALL}",
        )
    for key, what in _LMCACHE_REFUSED.items():
        if extra.get(key):
            raise EngineError(
                f"the twin runs {LMCACHE} with synchronous loads from a host tier, not {what}",
                f"drop {key} from kv_connector_extra_config",
            )


#: what a release's host-tier manager or spec calls its size (0.32: chunks of blocks)
_CAPACITY_NAMES = ("num_chunks", "_num_chunks", "num_blocks", "_num_blocks")


def host_capacity(*holders: object) -> int | None:
    """The host tier's size as the first of `holders` (a connector's manager, its spec) that
    states one says it (None: none does, on this release)."""
    for holder in holders:
        for name in _CAPACITY_NAMES:
            value = getattr(holder, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def check_host_tier(connector: str, capacity: int | None, host_bytes: object) -> None:
    """EngineError when the connector's host tier, as vLLM sized it, holds nothing: every store
    would fail, nothing would ever load, and a case would read as an engine that never stalls.

    The twin gives the connector the bytes (`host_bytes`, its cpu_bytes_to_use) of `[twin]
    kv_host_blocks` blocks; a release that sizes its tier from other figures (its KV pool's
    bytes per block, which the twin's token pages may not state) can find room for none.
    """
    if capacity is None or capacity > 0:
        return
    raise EngineError(
        f"{connector}'s host tier holds 0 blocks on this vLLM (cpu_bytes_to_use = {host_bytes}, "
        "from [twin] kv_host_blocks): every store would fail",
        "this release sizes the tier from figures the twin does not give it: run the case on "
        "another release (kit engine release list) or on a real engine",
    )
