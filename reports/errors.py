"""The reports package's root exception: a user-facing failure with a one-line hint."""


class ReportError(Exception):
    """A run directory is missing or unreadable."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint
