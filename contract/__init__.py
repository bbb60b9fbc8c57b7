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

from contract.faces import public_face

if TYPE_CHECKING:  # the face, once: each name and its module (run time: loaded on first use)
    from contract.errors import StallkitError as StallkitError
    from contract.errors import validation_location as validation_location
    from contract.errors import validation_message as validation_message
    from contract.gpu import GpuSource as GpuSource
    from contract.gpu import GpuSourceError as GpuSourceError
    from contract.gpu import GpuSourceField as GpuSourceField

if not TYPE_CHECKING:
    __all__, __getattr__, __dir__ = public_face(__name__)
