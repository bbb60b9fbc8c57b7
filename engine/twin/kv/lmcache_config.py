"""LMCache's side of a twin's `--kv-transfer-config`: its settings, and a clean start per twin.

LMCache reads its settings from `lmcache.*` keys of `kv_connector_extra_config` (over its
environment variables) into one configuration per process, and keeps one `LMCacheEngine` per
process under a fixed name (the bypass lookup's). A twin that builds a second engine in the
same process (a test, a reused worker) must not inherit the first one's: `prepare_lmcache`
drops both before vLLM builds the connector. It also quiets LMCache (it logs every lookup at
INFO and prints a banner; a value the user set stays) and turns off its usage report, which
would reach out of the process; `route_lmcache_logging` sends what it still logs where vLLM's
records go (the arm's engine log), each message once. Imports lmcache only inside
`prepare_lmcache`.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

__all__ = ["HOST_BLOCKS_KEY", "lmcache_extra", "prepare_lmcache", "route_lmcache_logging"]

#: the extra-config key that carries `kv_host_blocks` to the twin's driver (LMCache reads only
#: its `lmcache.` keys and a few named ones, not this)
HOST_BLOCKS_KEY = "twin_host_blocks"

#: LMCache hashes chunk names with Python's `hash` by default, which differs between
#: processes unless PYTHONHASHSEED is set; vLLM's sha256_cbor is the same everywhere
_HASH_KEY = "lmcache.pre_caching_hash_algorithm"
#: the one warning LMCache's loggers raise when OpenTelemetry's SDK is installed
_OTEL_DEPRECATED = "`LoggingHandler` in `opentelemetry-sdk` is deprecated"
_MODULES = (
    "lmcache.integration.vllm.vllm_v1_adapter",
    "lmcache.integration.vllm.vllm_service_factory",
    "lmcache.v1.lookup_client.factory",
    "lmcache.v1.cache_engine",
)


def lmcache_extra(extra: dict[str, Any], host_blocks: int) -> dict[str, Any]:
    """`kv_connector_extra_config` for LMCache in a twin: the kit's, with a process-independent
    chunk hash unless it names one, and the host tier's size for the driver."""
    return {_HASH_KEY: "sha256_cbor", **extra, HOST_BLOCKS_KEY: host_blocks}


def prepare_lmcache() -> None:
    """Quiet LMCache, then drop the configuration and engine an earlier twin left."""
    os.environ.setdefault("LMCACHE_LOG_LEVEL", "ERROR")
    os.environ.setdefault("LMCACHE_DISABLE_BANNER", "1")
    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    # each of its loggers attaches OpenTelemetry's log handler, deprecated there
    warnings.filterwarnings("ignore", _OTEL_DEPRECATED, DeprecationWarning)
    from lmcache.integration.vllm import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
        utils,
    )
    from lmcache.v1.cache_engine import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
        LMCacheEngineBuilder,
    )

    if LMCacheEngineBuilder.get(utils.ENGINE_NAME) is not None:
        LMCacheEngineBuilder.destroy(utils.ENGINE_NAME)
    utils._config_instance = None


class _Once(logging.Handler):
    """Hands each message (its format string, per logger) once to vLLM's logger: LMCache may
    log one line per lookup, every step."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[tuple[str, str]] = set()

    def emit(self, record: logging.LogRecord) -> None:
        key = (record.name, str(record.msg))
        if key not in self._seen:
            self._seen.add(key)
            logging.getLogger("vllm").handle(record)


def route_lmcache_logging() -> None:
    """LMCache's loggers (each writes to stderr on its own) hand their records to the
    `lmcache` logger, which passes them to vLLM's (the arm's engine log in a twin arm)."""
    for name in [n for n in logging.root.manager.loggerDict if n.startswith("lmcache.")]:
        child = logging.getLogger(name)
        child.handlers.clear()
        child.propagate = True
    lmcache_log = logging.getLogger("lmcache")
    lmcache_log.handlers = [_Once()]
    lmcache_log.propagate = False
