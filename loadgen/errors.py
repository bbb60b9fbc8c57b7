"""The load generator's root exception: a user-facing failure with a one-line hint."""


class LoadError(Exception):
    """The load could not start (server unreachable, not OpenAI-compatible, bad bounds)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint
