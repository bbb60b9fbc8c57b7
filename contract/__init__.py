"""The contract layer: the typed seams every role package may import.

`engine`, `loadgen`, `monitor`, `kits` and `reports` may all import this package; it imports
none of them (a test over the imports holds it to that). Today it holds the error tree
(`contract.errors`).
"""

from contract.errors import StallkitError, validation_location, validation_message

__all__ = ["StallkitError", "validation_location", "validation_message"]
