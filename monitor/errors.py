"""The monitor's errors: the `MonitorError` branch of the tool's one exception tree.

The root, `stallkit.contract.errors.StallkitError`, carries the message and the hint; the tree is
documented there.
"""

from stallkit.contract.errors import StallkitError


class MonitorError(StallkitError):
    """The monitor could not start (unreachable engine, failing GPU source, bad thresholds)."""
