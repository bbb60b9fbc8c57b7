"""The contract layer: the typed seams every role package may import.

`engine`, `loadgen`, `monitor`, `kits` and `reports` may all import this package; it imports
none of them (a test over the imports holds it to that). It holds the error tree
(`stallkit.contract.errors`), the run directory's files as typed models with one JSONL writer and
reader (`stallkit.contract.files`, `records`, `timeline`, `meta`, `summary`, `kitfile`, `ab`,
`forensics`, `jsonl`; their JSON Schemas from `stallkit.contract.schema`), the time base
(`stallkit.contract.time`), the metric family names every role shares (`stallkit.contract.names`), the
GPU-source spec (`stallkit.contract.gpu`) and the lazy faces of the role packages (`stallkit.contract.faces`).
Importing the package imports nothing but the standard library: each name below loads its
module on first use, so `stallkit.contract.names` stays importable inside vLLM's engine-core process,
where pydantic is not wanted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stallkit.contract.faces import public_face

if TYPE_CHECKING:  # the face, once: each name and its module (run time: loaded on first use)
    from stallkit.contract.errors import StallkitError as StallkitError
    from stallkit.contract.errors import validation_location as validation_location
    from stallkit.contract.errors import validation_message as validation_message
    from stallkit.contract.gpu import GpuSource as GpuSource
    from stallkit.contract.gpu import GpuSourceError as GpuSourceError
    from stallkit.contract.gpu import GpuSourceField as GpuSourceField

if not TYPE_CHECKING:
    __all__, __getattr__, __dir__ = public_face(__name__)
