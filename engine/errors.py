"""The engine package's errors: the `EngineError` branch of the tool's one exception tree.

The root, `stallkit.contract.errors.StallkitError`, carries the message and the hint; the tree is
documented there.
"""

from stallkit.contract.errors import StallkitError


class EngineError(StallkitError):
    """An engine could not be parsed, started, reached or stopped."""
