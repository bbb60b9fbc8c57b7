"""Shared pieces of the command line: the console, mapping user errors to exit codes, and Ctrl-C.

Ctrl-C (and SIGTERM, which every command takes as Ctrl-C) goes through one pair: `ctrl_c()`
around the work stops it and lets the command go on after the block (to keep and sum up what
finished, or, for a watch such as `kit monitor`, to end normally); `interrupted()` is the exit
of a command that was cut short: 130, with one red line when it has something to say.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from stallkit.contract.errors import NOT_UTF8_HINT, StallkitError, not_utf8

P = ParamSpec("P")
R = TypeVar("R")

#: Exit code of a user error (bad input, unreachable engine, invalid kit).
EXIT_USER_ERROR = 2
#: Exit code of a command cut short by Ctrl-C or SIGTERM (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130

err_console = Console(stderr=True)


def fail(message: str, hint: str = "", code: int = EXIT_USER_ERROR) -> typer.Exit:
    """Print one red line (and the hint) on stderr; return the Exit to raise."""
    line = f"[bold red]error:[/] {escape(message)}"
    if hint:
        line += f" [dim](hint: {escape(hint)})[/]"
    err_console.print(line, soft_wrap=True, highlight=False)
    return typer.Exit(code)


@dataclass
class CtrlC:
    """Whether Ctrl-C stopped the work within `ctrl_c()`."""

    pressed: bool = False


@contextlib.contextmanager
def ctrl_c() -> Iterator[CtrlC]:
    """Within: Ctrl-C (or SIGTERM) stops the work, and the command goes on after the block; the
    `CtrlC` it yields says whether it was pressed."""
    seen = CtrlC()
    try:
        yield seen
    except KeyboardInterrupt:
        seen.pressed = True


def interrupted(message: str = "", hint: str = "") -> typer.Exit:
    """The exit to raise for a command cut short: 130, after one red line when `message`."""
    if message:
        return fail(message, hint, code=EXIT_INTERRUPTED)
    return typer.Exit(EXIT_INTERRUPTED)


def help_when_bare(ctx: typer.Context) -> None:
    """A group's callback: print its help and exit 0 when no command is given."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def user_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn the tool's own exceptions into one line and exit code 2, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except StallkitError as exc:
            raise fail(str(exc), exc.hint) from None
        except OSError as exc:  # the system refused: a path, the disk, the open-file limit
            raise fail(*os_error_line(exc)) from None
        except (
            UnicodeDecodeError
        ) as exc:  # a file read without `stallkit.contract.errors.read_text`
            raise fail(f"a file is {not_utf8('', exc).lstrip(': ')}", NOT_UTF8_HINT) from None

    return wrapper


#: errno -> what the user can do about it; any other OSError is its own message, no hint
_OS_HINTS = {
    **dict.fromkeys(
        (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.EROFS),
        "check the path and its permissions",
    ),
    **dict.fromkeys((errno.ENOSPC, errno.EDQUOT), "free some disk space, or write elsewhere"),
    **dict.fromkeys(
        (errno.EMFILE, errno.ENFILE),
        "raise the open-file limit (`ulimit -n`) or run fewer agents",
    ),
}


def os_error_line(exc: OSError) -> tuple[str, str]:
    """The message (the file, when the error names one) and the hint for an OSError."""
    if exc.errno == errno.EEXIST and exc.filename and not Path(exc.filename).is_dir():
        # making a directory where a file is (`--out notes.txt`)
        return f"{exc.filename} is a file, not a directory", "give a directory path"
    where = f"{exc.filename}: " if exc.filename else ""
    message = f"{where}{exc.strerror or exc}"
    return message, _OS_HINTS.get(exc.errno or 0, "")


def _interrupt() -> None:
    """A loop callback: Ctrl-C, raised where the loop runs its callbacks."""
    raise KeyboardInterrupt


def _stop(signum: int, frame: FrameType | None) -> None:
    """The handler of SIGTERM, and of SIGINT where Python's default had it. A signal handler
    runs in whatever frame is executing; within an event loop that may be a protocol's callback
    (a stream's `data_received`), where uvloop catches a KeyboardInterrupt, prints "Fatal error
    on transport" with its traceback and goes on as if nothing happened. So within a loop the
    signal is handed to the loop, which raises KeyboardInterrupt between two callbacks: it
    leaves `asyncio.run` (or `Runner.run`), whose close cancels the tasks left and lets them
    record their end; outside a loop it is raised here, as Python's own handler would."""
    if signum == signal.SIGTERM:
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler) and handler is not _stop:  # a Ctrl-C handler of a block within
            signal.raise_signal(signal.SIGINT)  # (a pool holding signals): it decides
            return
    asyncio = sys.modules.get("asyncio")  # not imported: no loop runs
    loop = None if asyncio is None else asyncio.events._get_running_loop()
    if loop is None:
        raise KeyboardInterrupt
    loop.call_soon_threadsafe(_interrupt)


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """Within: SIGTERM (a `kill`, a job's time limit, `timeout`) is Ctrl-C, and both reach an
    event loop as a loop does its work, never inside one of its callbacks (`_stop`). The one
    place the tool handles the two: every command runs within it
    (`stallkit.kits.cli.commands`). What was recorded is kept and summed up before the command
    exits 130. A Ctrl-C that is ignored (a script's background job) stays ignored; SIGTERM
    still stops. Outside the main thread: no change."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous_term = signal.signal(signal.SIGTERM, _stop)
    # asyncio.run installs its own Ctrl-C handler only over Python's default: with this one
    # in its place, a loop takes Ctrl-C as it takes SIGTERM
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is signal.default_int_handler:
        signal.signal(signal.SIGINT, _stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        if previous_int is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous_int)
