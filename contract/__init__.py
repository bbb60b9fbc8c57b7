"""The contract layer: the typed seams every role package may import.

`engine`, `loadgen`, `monitor`, `kits` and `reports` may all import this package; it imports
none of them (a test over the imports holds it to that). It holds the error tree
(`contract.errors`), the run directory's files as typed models with one JSONL writer and
reader (`contract.files`, `records`, `timeline`, `meta`, `summary`, `kitfile`, `ab`,
`forensics`, `jsonl`; their JSON Schemas from `contract.schema`), the time base
(`contract.time`), the metric family names every role shares (`contract.names`), the
GPU-source spec (`contract.gpu`) and the lazy faces of the role packages (`contract.faces`).
Importing the package imports nothing but the standard library: each name below loads its
module on first use, so `contract.names` stays importable inside vLLM's engine-core process,
where pydantic is not wanted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.faces import lazy_face

if TYPE_CHECKING:
    from contract.errors import StallkitError, validation_location, validation_message
    from contract.gpu import GpuSource, GpuSourceError, GpuSourceField

#: public name -> the module that defines it
_LAZY = {
    "StallkitError": "contract.errors",
    "validation_location": "contract.errors",
    "validation_message": "contract.errors",
    "GpuSource": "contract.gpu",
    "GpuSourceError": "contract.gpu",
    "GpuSourceField": "contract.gpu",
}

__all__ = [
    "GpuSource",
    "GpuSourceError",
    "GpuSourceField",
    "StallkitError",
    "validation_location",
    "validation_message",
]

if not TYPE_CHECKING:  # mypy reads the imports above; at run time names load on first use
    __getattr__, __dir__ = lazy_face(__name__, _LAZY)
