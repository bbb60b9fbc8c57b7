"""The twin's `async_scheduling` setting, without vLLM: what `auto` resolves to, which class
each setting builds, and a kit's bad value refused in one line naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from stallkit.engine.twin.config import PATCHED_SCHEDULER, STOCK_SCHEDULER, TwinConfig
from stallkit.engine.vllm_plugin import ASYNC_PATCHED_SCHEDULER

REPO = Path(__file__).resolve().parents[3]


def test_off_is_the_default_and_builds_the_named_class() -> None:
    config = TwinConfig()
    assert config.async_scheduling == "off" and not config.async_on
    assert config.scheduler_class_name == STOCK_SCHEDULER


def test_auto_is_on_as_vllm_serve_picks_on_a_gpu_unless_ngram_drafts() -> None:
    assert TwinConfig(async_scheduling="auto").async_on
    assert not TwinConfig(async_scheduling="auto", num_speculative_tokens=2).async_on
    with pytest.raises(ValidationError, match="ngram drafts"):
        TwinConfig(async_scheduling="on", num_speculative_tokens=2)


def test_on_picks_the_async_counterpart_and_keeps_any_other_class() -> None:
    stock = TwinConfig(async_scheduling="on")
    assert stock.scheduler_class_name == "vllm.v1.core.sched.async_scheduler.AsyncScheduler"
    patched = TwinConfig(async_scheduling="on", scheduler_cls=PATCHED_SCHEDULER)
    assert patched.scheduler_class_name == ASYNC_PATCHED_SCHEDULER
    mine = TwinConfig(async_scheduling="on", scheduler_cls="mypkg.sched.Mine")
    assert mine.scheduler_class_name == "mypkg.sched.Mine"


def test_a_bad_value_is_one_line_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\n[twin]\nasync_scheduling = "maybe"\n', encoding="utf-8")
    argv = ["ab", "--kit", str(path), "--base", "twin:stock", "--fix", "twin:stock", "--dry-run"]
    done = subprocess.run(
        [sys.executable, "-m", "stallkit", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("error: ") and "twin.async_scheduling" in lines[0]
    assert "'auto', 'on' or 'off'" in lines[0]
