"""`kit engine calibrate` refusals, through a real `kit` process: one red line, exit 2, no file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import kit, one_error_line


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["sim:base"], "sim:base has no real engine steps to time"),
        (
            ["vllm:/nonexistent", "--repeats", "0"],
            "--repeats: Input should be greater than or equal to 1",
        ),
        (
            ["vllm:/nonexistent", "--empty-step-s", "0"],
            "--empty-step-s: Input should be greater than 0",
        ),
    ],
)
def test_a_calibration_that_cannot_run_is_one_line_and_writes_nothing(
    tmp_path: Path, args: list[str], words: str
) -> None:
    out = tmp_path / "model.json"
    done = kit("engine", "calibrate", *args, "--out", str(out))
    assert words in one_error_line(done)
    assert not out.exists()


def test_an_image_with_no_daemon_to_ask_is_one_line_that_names_the_daemon(tmp_path: Path) -> None:
    """`NAME:TAG` reads as a docker image; with no daemon to look it up, the error says so and
    points at the other engine forms, whatever daemon this machine has."""
    out = tmp_path / "model.json"
    dead = f"unix://{tmp_path / 'no-daemon.sock'}"
    done = kit("engine", "calibrate", "nosuch:thing", "--out", str(out), env={"DOCKER_HOST": dead})
    line = one_error_line(done)
    assert "no docker daemon reachable" in line and "nosuch:thing" in line, line
    assert "kit run --help" in line
    assert not out.exists()


def test_calibrate_has_help() -> None:
    done = kit("engine", "calibrate", "--help")
    assert done.returncode == 0, done.stderr
    assert "--empty-step-s" in done.stdout and "url:http://HOST:PORT" in done.stdout
