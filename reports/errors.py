"""The reports package's errors: the `ReportError` branch of the tool's one exception tree.

The root, `stallkit.contract.errors.StallkitError`, carries the message and the hint; the tree is
documented there.
"""

from stallkit.contract.errors import StallkitError


class ReportError(StallkitError):
    """A run directory is missing or unreadable."""


class DamagedRunError(ReportError):
    """Some seeds of a run directory cannot be read: no verdict over a silently smaller set."""
