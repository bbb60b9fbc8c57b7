"""The kit layer's errors, and the set of errors the command line reports as one line.

`KitError` is the kits branch of the tool's one exception tree (rooted at
`stallkit.contract.errors.StallkitError`, where the tree is documented); every role's errors share that
root, so the command line catches them all with one class.
"""

from stallkit.contract.errors import StallkitError


class KitError(StallkitError):
    """A kit, run or A/B request is invalid or failed."""


class OverrideError(KitError):
    """A value given on the command line to override a kit field failed validation."""

    def __init__(self, keys: list[str], message: str, hint: str = "") -> None:
        super().__init__(f"invalid override {message}", hint or "see the command's --help")
        #: the problem without the `invalid override` prefix, and the hint only when it says
        #: more than the default (a mistyped key: the nearest kit key)
        self.detail, self.key_hint = message, hint
        #: the overridden fields' dotted keys (e.g. `load.duration_s`), for the caller to name
        #: its flags
        self.keys = keys


#: The errors the command line prints as one red line with a hint (exit code 2).
USER_ERRORS: tuple[type[Exception], ...] = (StallkitError,)
