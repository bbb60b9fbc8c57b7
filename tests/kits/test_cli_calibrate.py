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
        (["nosuch:thing"], "unknown"),
    ],
)
def test_a_calibration_that_cannot_run_is_one_line_and_writes_nothing(
    tmp_path: Path, args: list[str], words: str
) -> None:
    out = tmp_path / "model.json"
    done = kit("engine", "calibrate", *args, "--out", str(out))
    assert words in one_error_line(done)
    assert not out.exists()


def test_calibrate_has_help() -> None:
    done = kit("engine", "calibrate", "--help")
    assert done.returncode == 0, done.stderr
    assert "--empty-step-s" in done.stdout and "url:http://HOST:PORT" in done.stdout
