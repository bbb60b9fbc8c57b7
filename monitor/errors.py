"""The monitor's errors: the `MonitorError` branch of the tool's one exception tree.

The root, `contract.errors.StallkitError`, carries the message and the hint; the tree is
documented there.
"""

from contract.errors import StallkitError


class MonitorError(StallkitError):
    """The monitor could not start (unreachable engine, failing GPU source, bad thresholds)."""
