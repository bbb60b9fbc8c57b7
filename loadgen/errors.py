"""The load generator's errors: the `LoadError` branch of the tool's one exception tree.

The root, `stallkit.contract.errors.StallkitError`, carries the message and the hint; the tree is
documented there.
"""

from stallkit.contract.errors import StallkitError


class LoadError(StallkitError):
    """The load could not start (server unreachable, not OpenAI-compatible, bad bounds)."""
