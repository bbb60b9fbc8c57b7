"""The kit layer's root exception and the set of errors the CLI reports as one line.

Each role package (engine, loadgen, monitor, reports) keeps its own root exception so
that none imports another; this module gathers them for the command line.
"""

from engine.errors import EngineError
from loadgen.errors import LoadError
from monitor.errors import MonitorError
from reports.errors import ReportError


class KitError(Exception):
    """A kit, run or A/B request is invalid or failed."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


USER_ERRORS: tuple[type[Exception], ...] = (
    KitError,
    EngineError,
    LoadError,
    MonitorError,
    ReportError,
)
