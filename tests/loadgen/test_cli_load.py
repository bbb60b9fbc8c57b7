"""`kit load` through the CLI runner: one-line user errors, a short real run, no key leaks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stallkit.kits.cli import app

runner = CliRunner()


def test_unreachable_url_is_one_line_and_exit_2(closed_port_url: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["load", closed_port_url, "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "cannot reach" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()  # nothing started, nothing written


def test_non_openai_server_is_refused(hostile_in_thread: Any) -> None:
    with hostile_in_thread(models_body=b"<html>hi</html>") as server:
        result = runner.invoke(app, ["load", server.url])
    assert result.exit_code == 2 and "not an OpenAI-compatible" in result.stderr


def test_context_bound_above_max_model_len_is_refused(hostile_in_thread: Any) -> None:
    with hostile_in_thread(max_model_len=32768) as server:
        result = runner.invoke(app, ["load", server.url, "--max-context", "60000"])
    assert result.exit_code == 2
    assert "max_model_len 32768" in result.stderr and "hint" in result.stderr


def test_invalid_bounds_are_a_user_error() -> None:
    result = runner.invoke(app, ["load", "http://127.0.0.1:1", "--min-context", "9000",
                                 "--max-context", "8000"])  # fmt: skip
    assert result.exit_code == 2 and "invalid load options" in result.stderr


@pytest.mark.wallclock
def test_short_run_writes_records_summary_and_no_key(
    hostile_in_thread: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("TEST_CLI_KEY", "topsecret-value")
    out = tmp_path / "run"
    with hostile_in_thread(script=["ok"]) as server:
        result = runner.invoke(app, [
            "load", server.url, "--agents", "1", "--max-turns", "2", "--min-context", "1500",
            "--max-context", "7000", "--out", str(out), "--api-key-env", "TEST_CLI_KEY",
        ])  # fmt: skip
        assert set(server.auth) == {"Bearer topsecret-value"}
    assert result.exit_code == 0, result.output
    lines = (out / "turns.jsonl").read_text().splitlines()
    assert [json.loads(line)["outcome"] for line in lines] == ["ok", "ok"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["turns_ok"] == 2 and summary["prompt_size_mismatches"] == 0
    assert "load summary" in result.stdout
    for path in out.iterdir():
        assert "topsecret-value" not in path.read_text()
    assert "topsecret-value" not in result.output


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("127.0.0.1:8000", "no scheme"),
        ("notaurl", "no scheme"),
        ("ftp://127.0.0.1:21/", "unsupported URL scheme 'ftp'"),
    ],
)
def test_url_without_http_scheme_is_one_red_line_from_the_real_kit(
    url: str, says: str, tmp_path: Path
) -> None:
    kit = Path(sys.executable).with_name("kit")
    done = subprocess.run(
        [str(kit), "load", url, "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "hint" in lines[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "run").exists()
