"""The dashboard rendered into a StringIO console, in every banner state; plain log lines."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from monitor.dashboard import Dashboard, LogLines, fmt_s, live_dashboard, sparkline
from monitor.events import (
    DetectorState,
    Down,
    GpuReading,
    MonitorEvent,
    Sample,
    StallStarted,
    Verdict,
)
from monitor.parse import parse_metrics
from monitor.rates import snapshot_deltas

DATA = Path(__file__).parent / "data"
URL = "http://127.0.0.1:8000"


def render(dashboard: Dashboard) -> str:
    console = Console(file=io.StringIO(), width=110, color_system=None, force_terminal=False)
    console.print(dashboard.render())
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


def fed(*events: MonitorEvent) -> Dashboard:
    dashboard = Dashboard(URL)
    two = parse_metrics((DATA / "vllm-0.32-two-engines.txt").read_text())
    dashboard.update(Sample(0.0, two, None))
    dashboard.update(Sample(1.0, two, snapshot_deltas(two, two, 1.0)))
    dashboard.update(GpuReading(1.0, {"0": 1.0, "1": 0.0}))
    for event in events:
        dashboard.update(event)
    return dashboard


@pytest.mark.parametrize(
    ("state", "banner"),
    [
        (DetectorState("ok", gpu_checked=True), "OK"),
        (DetectorState("idle", gpu_checked=True), "IDLE"),
        (DetectorState("suspect", 30.0, 42.0, gpu_checked=True), "SUSPECT 42 s"),
        (DetectorState("stalled", 30.0, 95.0, "spinning", True), "STALLED spinning 1m35s"),
        (DetectorState("stalled", 30.0, 61.0, "frozen", False), "STALLED frozen 1m01s (metrics"),
        (DetectorState("down", 100.0, 7.0), "DOWN 7 s: HTTP 503"),
    ],
)
def test_banner_in_each_state(state: DetectorState, banner: str) -> None:
    events: list[MonitorEvent] = [Verdict(125.0, state)]
    if state.status == "down":
        events.insert(0, Down(125.0, "HTTP 503"))
    out = render(fed(*events))
    assert banner in out
    assert URL in out and "attached 2m05s" in out


def test_panels_show_the_stall_signals() -> None:
    two = parse_metrics((DATA / "vllm-0.32-two-engines.txt").read_text())
    dashboard = fed(
        Verdict(80.0, DetectorState("stalled", 10.0, 70.0, "frozen", True)),
        StallStarted(70.0, 10.0, "frozen", True, two),
    )
    dashboard.add_panel(lambda: Text("agents: 12 streaming, 4 waiting"))
    out = render(dashboard)
    assert "running" in out and "16" in out
    assert "capacity 5, deferred 3" in out
    assert "98.0%" in out  # KV of the fullest engine
    assert "GPU 0" in out and "GPU 1" in out
    assert "stall started (frozen)" in out
    assert "engine 1" in out
    assert "agents: 12 streaming" in out


def test_sparkline_and_durations() -> None:
    assert sparkline([0, 0, 0]) == "▁▁▁"
    assert sparkline([0, 50, 100]) == "▁▅█"
    assert len(sparkline([float(i) for i in range(500)], width=40)) == 40
    assert (fmt_s(5), fmt_s(65), fmt_s(3720)) == ("5 s", "1m05s", "1h02m")


async def test_live_dashboard_repaints_and_leaves_the_last_frame() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=100, force_terminal=True, color_system=None)
    dashboard = Dashboard(URL)
    async with live_dashboard(dashboard, console, refresh_per_s=50):
        dashboard.update(Verdict(3.0, DetectorState("suspect", 1.0, 2.0)))
    assert "SUSPECT 2 s" in buf.getvalue()


def test_log_lines() -> None:
    buf = io.StringIO()
    lines = LogLines(Console(file=buf, width=200, color_system=None), every_s=10)
    two = parse_metrics((DATA / "vllm-0.32-two-engines.txt").read_text())
    for t in range(25):
        lines.handle(Sample(float(t), two, None))
        lines.handle(Verdict(float(t), DetectorState("ok")))
    lines.handle(Down(26.0, "HTTP 503"))
    lines.handle(Down(27.0, "HTTP 503"))
    lines.handle(StallStarted(90.0, 30.0, "frozen", False, two))
    out = buf.getvalue().splitlines()
    assert sum("gen 0.0 tok/s" in line for line in out) == 3  # t = 0, 10, 20
    assert sum("down: HTTP 503" in line for line in out) == 1
    assert any("state OK" in line for line in out)
    assert any("STALL started: frozen" in line and "metrics only" in line for line in out)
