"""Run the monitor end to end: the event stream into the timeline, the view, and an outcome.

This is what `kit monitor` runs, and a template for callers that add their own consumers:
`watch()`'s events handed to every sink by the loop's `consume()`, which stops when told.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rich.console import Console

from stallkit.contract.files import TIMELINE_FILE
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import (
    Down,
    MonitorEvent,
    Sample,
    StallEnded,
    StallStarted,
    StopRequested,
)
from stallkit.monitor.live.dashboard import Dashboard, LogLines, live_dashboard
from stallkit.monitor.live.loop import EventSink, consume
from stallkit.monitor.live.timeline import TimelineWriter
from stallkit.monitor.live.watch import watch
from stallkit.monitor.signals.dialects import Dialect
from stallkit.monitor.signals.gpu import GpuReader

Display = Literal["live", "lines", "none"]


#: Anything that consumes monitor events (has `handle(event)`).
Sink = EventSink[MonitorEvent]


@dataclass
class MonitorOutcome:
    """What a monitor run saw."""

    samples: int = 0
    downs: int = 0
    stalls: list[StallStarted] = field(default_factory=list)
    ended: list[StallEnded] = field(default_factory=list)
    stop_requested: bool = False
    exited_on_stall: bool = False
    #: stopped from outside (Ctrl-C) before its own end
    stopped: bool = False
    timeline: Path | None = None

    def handle(self, event: MonitorEvent) -> None:
        """Tally one event."""
        match event:
            case Sample():
                self.samples += 1
            case Down():
                self.downs += 1
            case StallStarted():
                self.stalls.append(event)
            case StallEnded():
                self.ended.append(event)
            case StopRequested():
                self.stop_requested = True


class _DashboardSink:
    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard

    def handle(self, event: MonitorEvent) -> None:
        self.dashboard.update(event)


async def run_monitor(
    url: str,
    config: MonitorConfig,
    gpu: GpuReader,
    *,
    out_dir: Path | None,
    duration_s: float | None = None,
    display: Display = "lines",
    console: Console | None = None,
    exit_on_stall: bool = False,
    dashboard: Dashboard | None = None,
    sinks: list[Sink] | None = None,
    stop_when: Callable[[MonitorEvent], bool] | None = None,
    dialect: Dialect | None = None,
) -> MonitorOutcome:
    """Watch `url` until `duration_s`, a stall (`exit_on_stall`) or `stop_when(event)`;
    `dialect`: its page's metric dialect (None: told apart from the first page)."""
    console = console or Console()
    outcome = MonitorOutcome()

    def stop(event: MonitorEvent) -> bool:
        if exit_on_stall and isinstance(event, StallStarted):
            outcome.exited_on_stall = True
            return True
        return stop_when is not None and stop_when(event)

    all_sinks: list[Sink] = [outcome, *(sinks or [])]
    view = dashboard or Dashboard(url)
    with contextlib.ExitStack() as stack:
        if out_dir is not None:
            writer = stack.enter_context(TimelineWriter(out_dir / TIMELINE_FILE))
            all_sinks.append(writer)
            outcome.timeline = writer.path
        if display == "lines":
            all_sinks.append(LogLines(console))
        elif display == "live":
            all_sinks.append(_DashboardSink(view))
        events = watch(url, config, gpu, duration_s=duration_s, dialect=dialect)
        # the live view starts only after the start checks, so a start error is one clean line
        live = (lambda: live_dashboard(view, console)) if display == "live" else None
        await consume(events, all_sinks, view=live, stop_when=stop)
    return outcome
