"""`kit monitor URL --exit-on-stall` beside AIPerf, against `kit sim serve` with a freeze: the
monitor names the engine's stall (`frozen`) and exits 3, while AIPerf only sees its requests
time out; AIPerf's own server-metrics export, replayed by `kit backtest --from-file`, shows the
same stall. "Is my benchmark hung, or the server?" answered beside any load tool.

AIPerf is found at $STALLKIT_AIPERF or on PATH (CI installs it into a virtual environment of
its own); without it the test is skipped with the reason. About 45 wall seconds, most of them
AIPerf starting its services (its first request goes out some 10-15 s after it starts): the
freeze is set late enough that AIPerf's requests are in flight when it strikes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.kits.test_trace_aiperf import TOKENIZER, _aiperf, _word_tokenizer
from tests.support import kit, kit_process, served_sim

SCALE = 10.0
FREEZE_WALL_S = 30.0  # after the simulator starts: AIPerf is sending by then

pytestmark = [
    pytest.mark.wallclock,
    # about 45 s of wall time, most of it AIPerf's own start-up (~13 s before its first
    # request) and the timeouts it waits out: the nightly CPU job runs it, CI's budget cannot
    pytest.mark.nightly,
    pytest.mark.skipif(
        _aiperf() is None,
        reason="AIPerf is not installed (pip install aiperf, or set STALLKIT_AIPERF to its aiperf)",
    ),
]


def _timeline(out: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (out / "timeline.jsonl").read_text().splitlines()]


def test_the_monitor_names_the_stall_while_aiperf_only_times_out(tmp_path: Path) -> None:
    aiperf = _aiperf()
    assert aiperf is not None
    _word_tokenizer(tmp_path / "hub")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    freeze = f"freeze@{FREEZE_WALL_S * SCALE:g}"
    with served_sim("--time-scale", f"{SCALE:g}", "--fault", freeze, kill_on_hang=True) as url:
        monitor = kit_process(
            "monitor", url, "--interval", "0.25", "--stall-after", "1", "--stop-after", "0",
            "--duration", "90", "--exit-on-stall", "--no-dashboard",
            "--out", str(tmp_path / "monitor"),
        )  # fmt: skip
        done = subprocess.run(
            [aiperf, "profile", "--model", "stallkit-sim", "--url", url, "--endpoint-type",
             "chat", "--streaming", "--tokenizer", TOKENIZER, "--ui-type", "none",
             "--output-artifact-dir", str(tmp_path / "aiperf"), "--workers-max", "1",
             "--no-gpu-telemetry", "--concurrency", "2", "--isl", "50", "--osl", "5000",
             "--benchmark-duration", "25", "--benchmark-grace-period", "2",
             "--request-timeout-seconds", "4", "--server-metrics-formats", "json", "jsonl"],
            capture_output=True, text=True, timeout=150, env=env, check=False,
        )  # fmt: skip
        out, err = monitor.communicate(timeout=60)
    # the monitor: a frozen stall, named, and exit 3
    assert monitor.returncode == 3, out[-2000:] + err[-2000:]
    [stall] = [x for x in _timeline(tmp_path / "monitor") if x["type"] == "stall_started"]
    assert stall["kind"] == "frozen" and "frozen" in out
    # AIPerf: requests that timed out, and no word of the engine's state
    records = [
        json.loads(x) for x in (tmp_path / "aiperf" / "profile_export.jsonl").read_text().split()
    ]
    errors = [r["error"]["type"] for r in records if r.get("error")]
    assert "TimeoutError" in errors, (errors, done.stdout[-2000:])
    said = (done.stdout + done.stderr).lower()
    assert "frozen" not in said and "stalled" not in said
    # its own server-metrics export holds the stall: kit backtest reads it
    export = tmp_path / "aiperf" / "server_metrics_export.jsonl"
    args = ["--no-gpu", "--stall-after", "1", "--out", str(tmp_path / "backtest")]
    replay = kit("backtest", "--from-file", str(export), *args)
    assert replay.returncode == 0, replay.stderr[-2000:]
    stalls = (tmp_path / "backtest" / "stalls.jsonl").read_text().splitlines()
    assert [json.loads(x)["kind"] for x in stalls][:1] == ["frozen"], replay.stdout
