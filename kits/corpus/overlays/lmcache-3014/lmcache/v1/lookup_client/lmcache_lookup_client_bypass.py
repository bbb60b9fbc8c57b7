"""LMCache's bypass lookup client with LMCache PR #3014's fix: `lookup_cache()` overridden.

A synchronous lookup client that keeps the base class's `lookup_cache()` answers None
("lookup in progress") for every request, so vLLM's scheduler skips the request on every
step and never calls `lookup()`. PR #3014 fixed MooncakeLookupClient by answering -1 ("no
result cached") instead; this module does the same for `LMCacheBypassLookupClient`. It loads
the installed module from its own file under another name, re-exports everything in it, and
replaces only the class: the rest of the client is lmcache's own.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_NAME = "lmcache_lookup_client_bypass.py"


def _shipped_module() -> ModuleType:
    """The installed module, loaded from its file (the first one on the package's path that
    is not this overlay's)."""
    here = Path(__file__).resolve().parent
    for entry in sys.modules[__name__.rpartition(".")[0]].__path__:
        path = Path(entry) / _NAME
        if path.is_file() and path.resolve().parent != here:
            name = __name__ + "_as_shipped"
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            return module
    raise ImportError(f"the installed lmcache has no {_NAME}")


_shipped = _shipped_module()
globals().update({k: v for k, v in vars(_shipped).items() if not k.startswith("__")})


class LMCacheBypassLookupClient(_shipped.LMCacheBypassLookupClient):  # type: ignore[misc,name-defined]
    """The bypass client, synchronous as it is: no lookup is ever in progress."""

    def lookup_cache(self, lookup_id: str) -> int:
        return -1
