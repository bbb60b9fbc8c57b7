"""The stallkit_* exporter and --on-stall: exporter values from events and against a frozen
simulator through `kit monitor`; the command runs once per stall with the verdict in its
environment, a failing or hanging one is recorded and the run goes on; bad input (a busy
metrics port, a command that does not exist) is one line and exit 2 before anything starts."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from stallkit.engine.launch.sim import SimLauncher
from stallkit.engine.spec import parse_spec
from stallkit.kits.cli import app
from stallkit.monitor.detect.events import (
    Down,
    GpuReading,
    Sample,
    StallEnded,
    StallOngoing,
    StallStarted,
)
from stallkit.monitor.on_stall.command import OnStallCommand, OnStallRunner
from stallkit.monitor.on_stall.exporter import StallExporter
from stallkit.monitor.signals.parse import MetricsSnapshot
from tests.alerting.alerting_support import streaming_load
from tests.support import kit, one_error_line

ENV_DUMP = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('STALLKIT_')}))"


def _values(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _v(
    values: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    base = {"engine": "http://e:1", "arm": "base"}
    return values[(name, frozenset({**base, **labels}.items()))]


def test_exporter_series_follow_the_events_and_are_served_on_loopback() -> None:
    exporter = StallExporter(clock=lambda: 1234.0)
    sink = exporter.sink("http://e:1", "base")
    snap = MetricsSnapshot(running=3, waiting=2, kv_usage=0.97, gen_tokens=10.0)
    sink.handle(Sample(1.0, snap, None))
    sink.handle(GpuReading(1.0, {"0": 3.0, "1": 1.0}))
    sink.handle(StallStarted(61.0, 1.0, "spinning", True, snap))
    sink.handle(StallOngoing(62.0, 1.0, "spinning", True, 61.0))
    sink.handle(Down(63.0, "HTTP 503"))
    port = exporter.serve("127.0.0.1", 0)
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        exporter.close()
    v = _values(text)
    assert _v(v, "stallkit_stall_active", kind="spinning") == 1
    assert _v(v, "stallkit_stall_active", kind="frozen") == 0
    assert _v(v, "stallkit_stalls_total", kind="spinning") == 1
    assert _v(v, "stallkit_stall_duration_seconds") == 61.0
    assert _v(v, "stallkit_requests_running") == 3 and _v(v, "stallkit_requests_waiting") == 2
    assert _v(v, "stallkit_kv_cache_usage_ratio") == 0.97
    assert _v(v, "stallkit_gpu_utilization_percent", gpu="0") == 3.0
    assert _v(v, "stallkit_scrape_failures_total") == 1 and _v(v, "stallkit_engine_up") == 0
    assert _v(v, "stallkit_last_sample_timestamp_seconds") == 1234.0
    assert not any(name.startswith("python_") for name, _ in v)  # own registry only
    sink.handle(StallEnded(70.0, 1.0, "spinning", 69.0))
    v = _values(httpx_free_render(exporter))
    assert _v(v, "stallkit_stall_active", kind="spinning") == 0
    assert _v(v, "stallkit_stall_duration_seconds") == 0


def httpx_free_render(exporter: StallExporter) -> str:
    from prometheus_client import generate_latest

    return generate_latest(exporter.registry).decode()


def _runner(
    tmp_path: Path, code: str, timeout_s: float = 10.0, on_end: bool = False
) -> OnStallRunner:
    command = OnStallCommand.parse(f"{sys.executable} -c {code!r}", timeout_s, on_end)
    return OnStallRunner(command, tmp_path, "http://127.0.0.1:8000", "base")


def _runs(tmp_path: Path) -> list[dict[str, object]]:
    lines = (tmp_path / "on-stall" / "runs.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


def test_on_stall_runs_once_per_stall_with_the_verdict_in_its_environment(tmp_path: Path) -> None:
    runner = _runner(tmp_path, ENV_DUMP, on_end=True)
    snap = MetricsSnapshot()
    runner.handle(StallStarted(61.0, 1.5, "frozen", True, snap))
    runner.handle(StallOngoing(62.0, 1.5, "frozen", True, 60.5))  # not a new stall
    runner.handle(StallEnded(70.0, 1.5, "frozen", 68.5))
    runner.close()
    runs = sorted(_runs(tmp_path), key=lambda r: str(r["event"]))
    assert [r["event"] for r in runs] == ["end", "start"]
    assert all(r["exit_code"] == 0 and r["timed_out"] is False for r in runs)
    start = json.loads((tmp_path / "on-stall" / "0000001500ms-start.log").read_text())
    assert start["STALLKIT_EVENT"] == "start" and start["STALLKIT_STALL_KIND"] == "frozen"
    assert start["STALLKIT_STALL_ONSET_S"] == "1.500"
    assert start["STALLKIT_ENGINE_URL"] == "http://127.0.0.1:8000"
    assert start["STALLKIT_RUN_DIR"] == str(tmp_path) and start["STALLKIT_ARM"] == "base"
    assert start["STALLKIT_FORENSICS_DIR"].endswith("forensics/0000001500ms")
    end = json.loads((tmp_path / "on-stall" / "0000001500ms-end.log").read_text())
    assert end["STALLKIT_STALL_DURATION_S"] == "68.500"


@pytest.mark.wallclock
def test_a_failing_or_hanging_command_is_recorded(tmp_path: Path) -> None:
    snap = MetricsSnapshot()
    failing = _runner(tmp_path / "f", "import sys; print('paging failed'); sys.exit(3)")
    failing.handle(StallStarted(61.0, 1.0, "frozen", True, snap))
    hanging = _runner(tmp_path / "h", "import time; time.sleep(60)", timeout_s=0.3)
    hanging.handle(StallStarted(61.0, 1.0, "frozen", True, snap))
    failing.close()
    hanging.close()
    (f,) = _runs(tmp_path / "f")
    assert f["exit_code"] == 3 and f["timed_out"] is False
    assert "paging failed" in (tmp_path / "f" / "on-stall" / str(f["log"])).read_text()
    (h,) = _runs(tmp_path / "h")
    assert h["timed_out"] is True and h["exit_code"] is None


def test_bad_input_is_one_line_and_exit_2_before_anything_starts(tmp_path: Path) -> None:
    runner = CliRunner()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for cmd in (["monitor", "http://127.0.0.1:9"], ["run", "--engine", "sim:base"]):
            out = tmp_path / cmd[0]
            result = runner.invoke(app, [*cmd, "--out", str(out), "--metrics-port", str(port)])
            assert result.exit_code == 2, result.output
            assert "cannot serve metrics" in result.output and "Traceback" not in result.output
            assert not out.exists()  # nothing started, nothing written
    ab = ["ab", "--clock", "wall", "--out", str(tmp_path / "ab")]
    result = runner.invoke(app, [*ab, "--on-stall", "no-such-pager --now"])
    assert result.exit_code == 2 and "--on-stall command not found: no-such-pager" in result.output
    assert not (tmp_path / "ab").exists()
    result = runner.invoke(app, ["monitor", "http://127.0.0.1:9", "--on-stall", "'unclosed"])
    assert result.exit_code == 2 and "cannot parse --on-stall" in result.output


@pytest.mark.wallclock
async def test_kit_monitor_exports_the_frozen_stall_and_runs_the_command(tmp_path: Path) -> None:
    launcher = SimLauncher(
        parse_spec("sim:base"), tmp_path / "sim", {}, 20.0, extra_args=["--freeze-at", "20"]
    )
    launcher.start()
    try:
        launcher.wait_healthy(30)
        url = launcher.url
        async with streaming_load(url, 2, max_tokens=50_000):
            out = tmp_path / "mon"
            argv = ["-m", "stallkit", "monitor", url, "--out", str(out), "--interval", "0.1"]
            argv += ["--stall-after", "0.5", "--gpu-source", f"dcgm:{url}/dcgm/metrics"]
            argv += ["--duration", "60", "--no-dashboard", "--metrics-port", "0"]
            argv += ["--on-stall", f"{sys.executable} -c {ENV_DUMP!r}"]
            proc = await asyncio.create_subprocess_exec(
                sys.executable, *argv, stdout=asyncio.subprocess.PIPE
            )
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            assert line.startswith("stallkit metrics on http://127.0.0.1:"), line
            metrics = line.split()[-1]
            active = 0.0
            async with httpx.AsyncClient(timeout=5) as client:
                for _ in range(300):  # stopped once seen; a loaded machine may be slow
                    values = _values((await client.get(metrics)).text)
                    key = ("stallkit_stall_active", frozenset(
                        {"engine": url, "arm": "monitor", "kind": "frozen"}.items()))  # fmt: skip
                    active = values.get(key, 0.0)
                    if active:
                        break
                    await asyncio.sleep(0.1)
                await asyncio.sleep(0.5)  # the stall's handlers (command, bundle) have started
            proc.send_signal(signal.SIGINT)  # Ctrl-C: what was recorded is kept
            await asyncio.wait_for(proc.communicate(), 60)
    finally:
        launcher.stop()
    assert active == 1.0
    assert (
        values[("stallkit_requests_running", frozenset({"engine": url, "arm": "monitor"}.items()))]
        == 2
    )
    assert proc.returncode == 0  # Ctrl-C is the way to stop the monitor
    (run,) = _runs(out)
    assert run["exit_code"] == 0 and run["event"] == "start"
    env = json.loads((out / "on-stall" / str(run["log"])).read_text())
    assert env["STALLKIT_STALL_KIND"] == "frozen" and env["STALLKIT_ENGINE_URL"] == url
    (bundle,) = (out / "forensics").iterdir()
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert "metrics.txt" in manifest["files"] and manifest["kind"] == "frozen"


def test_on_stall_and_the_exporter_are_refused_where_every_arm_is_virtual(tmp_path: Path) -> None:
    """They serve wall-clock arms: asked of a virtual A/B they would never run, so they are
    refused (one line) rather than ignored; beside a wall-clock arm the note names the others."""
    for flag in (["--on-stall", "true"], ["--metrics-port", "0"]):
        line = one_error_line(kit("ab", *flag, "--out", str(tmp_path / "v")))
        assert "every arm here runs on the virtual clock" in line and "--clock wall" in line
    assert not (tmp_path / "v").exists()
    # an attached arm must find something listening at its URL, even for a dry run
    with socket.create_server(("127.0.0.1", 0)) as listening:
        url = f"http://127.0.0.1:{listening.getsockname()[1]}"
        done = kit("ab", "--fix", f"url:{url}", "--on-stall", "true", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "note: --metrics-port and --on-stall skip the virtual-clock arms (sim:base)" in (
        done.stderr
    )
