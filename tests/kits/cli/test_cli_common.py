"""The command line's shared edge: an OSError is one red line whose hint fits its cause.

Any OSError used to say "check the path and its permissions", also for a full disk or the
open-file limit (a load with many agents runs out of file descriptors, not of paths).
"""

from __future__ import annotations

import errno
import os

import pytest
import typer
from typer.testing import CliRunner

from stallkit.kits.cli.common import EXIT_USER_ERROR, user_errors


def _fails_with(exc: OSError) -> tuple[int, str]:
    app = typer.Typer()

    @app.command()
    @user_errors
    def go() -> None:
        raise exc

    done = CliRunner().invoke(app, [])
    return done.exit_code, done.output


@pytest.mark.parametrize(
    ("code", "filename", "says", "hint"),
    [
        (errno.ENOENT, "kit.toml", "kit.toml: No such file or directory", "check the path"),
        (errno.EACCES, "out", "out: Permission denied", "check the path"),
        (errno.EISDIR, "runs", "runs: Is a directory", "check the path"),
        (errno.ENOTDIR, "a/b", "a/b: Not a directory", "check the path"),
        (errno.ENOSPC, "turns.jsonl", "turns.jsonl: No space left on device", "free some disk"),
        (errno.EMFILE, None, "Too many open files", "(`ulimit -n`) or run fewer agents"),
        (errno.ENFILE, None, "Too many open files in system", "`ulimit -n`"),
    ],
)
def test_an_os_error_is_one_line_with_the_hint_for_its_errno(
    code: int, filename: str | None, says: str, hint: str
) -> None:
    exit_code, output = _fails_with(OSError(code, os.strerror(code), filename))
    assert exit_code == EXIT_USER_ERROR
    assert len(output.strip().splitlines()) == 1, output
    assert output.startswith(f"error: {says} (hint: ") and hint in output, output


def test_another_os_error_is_its_own_message_without_a_path_hint() -> None:
    exit_code, output = _fails_with(
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    )
    assert exit_code == EXIT_USER_ERROR
    assert output.strip() == "error: Connection refused"


def test_ctrl_c_stops_the_work_and_the_command_goes_on_to_exit_130() -> None:
    from stallkit.kits.cli.common import EXIT_INTERRUPTED, ctrl_c, interrupted

    app = typer.Typer()
    kept: list[str] = []

    @app.command()
    def go(say: bool = False) -> None:
        with ctrl_c() as stop:
            kept.append("first")
            raise KeyboardInterrupt
        kept.append("summed up")  # what finished is kept, and summed up
        assert stop.pressed
        raise interrupted("interrupted; kept" if say else "")

    quiet = CliRunner().invoke(app, [])
    assert (quiet.exit_code, quiet.output, kept) == (EXIT_INTERRUPTED, "", ["first", "summed up"])
    said = CliRunner().invoke(app, ["--say"])
    assert said.exit_code == 130 and "error: interrupted; kept" in said.output
    with ctrl_c() as stop:
        pass
    assert not stop.pressed
