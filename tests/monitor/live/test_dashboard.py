"""The dashboard rendered into a StringIO console, in every banner state; plain log lines."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from stallkit.monitor.detect.events import (
    DetectorState,
    Down,
    GpuReading,
    MonitorEvent,
    Sample,
    StallStarted,
    StopRequested,
    Up,
    Verdict,
)
from stallkit.monitor.live.dashboard import Dashboard, LogLines, fmt_s, live_dashboard, sparkline
from stallkit.monitor.signals.parse import parse_metrics
from stallkit.monitor.signals.rates import snapshot_deltas

DATA = Path(__file__).parents[1] / "data"
URL = "http://127.0.0.1:8000"


def render(dashboard: Dashboard, width: int = 110, height: int = 60) -> str:
    console = Console(
        file=io.StringIO(), width=width, height=height, color_system=None, force_terminal=False
    )
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


def _stalled_with_panels() -> Dashboard:
    two = parse_metrics((DATA / "vllm-0.32-two-engines.txt").read_text())
    dashboard = fed(
        Verdict(80.0, DetectorState("stalled", 10.0, 70.0, "frozen", True)),
        *(StallStarted(70.0 + n, 10.0, "frozen", True, two) for n in range(8)),
    )
    agents = "\n".join(f"agent {n} streaming" for n in range(16))
    dashboard.add_panel(lambda: Text(agents), compact=lambda: Text("agents: 16 streaming"))
    dashboard.add_panel(lambda: Text("progress 1m of 15m"))
    return dashboard


def test_compact_layout_fits_an_80x24_terminal() -> None:
    out = render(_stalled_with_panels(), width=80, height=24)
    lines = out.splitlines()
    assert len(lines) <= 24 and max(len(line.rstrip()) for line in lines) <= 80
    # the state, tok/s, running/waiting and the stall banner, then the newest event
    assert "STALLED frozen 1m10s" in lines[2]
    assert "tok/s" in out and "running 16" in out and "waiting 8 (capacity 5, deferred 3)" in out
    assert "98.0%" in out and "0: 12 running, 2 waiting, KV 62%" in out
    assert "1m17s  stall started (frozen)" in out and "1m10s  stall" not in out
    # callers' panels in their compact form (or as they are, without one)
    assert "agents: 16 streaming" in out and "agent 15" not in out
    assert lines[-1].startswith("progress 1m of 15m")


def test_full_layout_where_it_fits() -> None:
    out = render(_stalled_with_panels(), width=80, height=60)
    assert "scheduler compute" in out and "agent 15 streaming" in out
    assert "1m10s  stall started (frozen)" in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80  # the sparkline too


async def test_live_dashboard_in_80x24_is_not_cut() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=80, height=24, force_terminal=True, color_system=None)
    dashboard = _stalled_with_panels()
    async with live_dashboard(dashboard, console, refresh_per_s=50):
        dashboard.update(Verdict(90.0, DetectorState("stalled", 10.0, 80.0, "frozen", True)))
    assert "STALLED frozen 1m20s" in buf.getvalue()
    assert "..." not in buf.getvalue()  # rich's mark of a frame taller than the terminal


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


def test_frozen_spell_marks_stale_values_and_follows_the_detector() -> None:
    """A page unanswered on accepted connections: the panel says its values are stale, the
    event list says no answer (not down), and the banner follows the stall's events even
    when the tick's closing verdict never arrives (a run stops at the stop request)."""
    one = parse_metrics((DATA / "vllm-0.32-two-engines.txt").read_text())
    dashboard = fed(
        Verdict(1.0, DetectorState("ok", gpu_checked=True)),
        Down(6.0, "connection accepted, page unanswered after 5 s (ReadTimeout)", True),
        GpuReading(6.0, {}, "dcgm:URL: GET unanswered after 5 s (ReadTimeout)"),
        Verdict(6.0, DetectorState("suspect", 1.0, 5.0, gpu_checked=True)),
        Down(43.0, "connection accepted, page unanswered after 5 s (ReadTimeout)", True),
        StallStarted(43.0, 1.0, "frozen", True, one),
        StopRequested(43.0, 1.0, 42.0),
    )
    out = render(dashboard, width=80, height=24)
    assert "STALLED frozen 42 s" in out and "SUSPECT" not in out
    assert "stale: last read 42 s ago" in out
    assert "no answer: connection accepted, page unanswered" in out and "down:" not in out
    assert "ReadTimeout:" not in out
    dashboard.update(Sample(50.0, one, snapshot_deltas(one, one, 49.0)))
    dashboard.update(Up(50.0, 44.0))
    out = render(dashboard, width=80, height=24)
    assert "stale" not in out and "page answered again after 44 s" in out


def test_log_lines_tell_an_unanswered_page_from_a_down_engine() -> None:
    buf = io.StringIO()
    lines = LogLines(Console(file=buf, width=200, color_system=None))
    for event in (
        Down(5.0, "connection accepted, page unanswered after 5 s (ReadTimeout)", True),
        Down(10.0, "connection accepted, page unanswered after 5 s (ReadTimeout)", True),
        Up(12.0, 7.0),
        Down(20.0, "GET http://x/metrics: ConnectError: [Errno 111] Connection refused"),
        Up(22.0, 2.0),
    ):
        lines.handle(event)
    out = buf.getvalue()
    assert out.count("no answer:") == 1 and "page answered again after 7 s" in out
    assert "down: GET http://x/metrics: ConnectError" in out and "up again after 2 s" in out
