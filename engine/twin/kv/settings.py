"""The `--kv-transfer-config` a twin takes, read from a vLLM command line and checked.

Pure (no vLLM import), so a kit naming a connector the twin cannot run is refused when it is
planned, in one line. The twin runs the connectors in `SUPPORTED_CONNECTORS`: their scheduler
half is vLLM's, their byte mover the twin's link (`stallkit.engine.twin.kv.link`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stallkit.engine.errors import EngineError

__all__ = ["SIMPLE", "SUPPORTED_CONNECTORS", "check_kv_transfer", "kv_transfer_from_args"]

#: vLLM's SimpleCPUOffloadConnector (its copy thread and CUDA events simulated)
SIMPLE = "SimpleCPUOffloadConnector"
#: connectors whose byte mover the twin simulates
SUPPORTED_CONNECTORS = ("OffloadingConnector", SIMPLE)
_FLAGS = ("--kv-transfer-config", "--kv_transfer_config")
_HINT = (
    "the twin runs --kv-transfer-config "
    '\'{"kv_connector":"OffloadingConnector","kv_role":"kv_both"}\' (vLLM\'s CPU offloading) '
    "or SimpleCPUOffloadConnector; run other connectors on a real engine"
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
