"""The contract layer: the typed seams every role package may import.

`engine`, `loadgen`, `monitor`, `kits` and `reports` may all import this package; it imports
none of them (a test over the imports holds it to that). It holds the error tree
(`contract.errors`), the metric family names every role shares (`contract.names`) and the
GPU-source spec (`contract.gpu`). Importing the package imports nothing but the standard
library: each name below loads its module on first use, so `contract.names` stays importable
inside vLLM's engine-core process, where pydantic is not wanted.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contract.errors import StallkitError, validation_location, validation_message
    from contract.gpu import GpuSource, GpuSourceError

#: public name -> the module that defines it
_LAZY = {
    "StallkitError": "contract.errors",
    "validation_location": "contract.errors",
    "validation_message": "contract.errors",
    "GpuSource": "contract.gpu",
    "GpuSourceError": "contract.gpu",
}

__all__ = [
    "GpuSource",
    "GpuSourceError",
    "StallkitError",
    "validation_location",
    "validation_message",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
