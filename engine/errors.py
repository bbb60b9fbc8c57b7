"""The engine package's root exception: a user-facing failure with a one-line hint."""


class EngineError(Exception):
    """An engine could not be parsed, started, reached or stopped."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint
