"""The monitor's root exception: a user-facing failure with a one-line hint."""


class MonitorError(Exception):
    """The monitor could not start (unreachable engine, failing GPU source, bad thresholds)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint
