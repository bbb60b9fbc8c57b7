"""Run a fleet watch end to end: events into `fleet.jsonl`, the view, the per-engine sinks.

What `kit monitor --prometheus` runs: `watch_fleet()`'s events handed to every sink by the
loop's `consume()`, and the tally. The live view starts only after the server answered, so a start
error is one clean line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from stallkit.contract.fleet import FLEET_FILE
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.fleet.bank import FORGET_AFTER_S
from stallkit.monitor.fleet.sinks import (
    FleetLines,
    FleetOutcome,
    FleetSink,
    FleetWriter,
)
from stallkit.monitor.fleet.view import FleetDashboard
from stallkit.monitor.fleet.watch import AnyFleetEvent, watch_fleet
from stallkit.monitor.live.dashboard import live_dashboard
from stallkit.monitor.live.loop import consume
from stallkit.monitor.live.session import Display
from stallkit.monitor.prometheus.client import PrometheusClient
from stallkit.monitor.prometheus.queries import FleetQuery


async def run_fleet(
    client: PrometheusClient,
    query: FleetQuery,
    config: MonitorConfig,
    *,
    out_dir: Path | None,
    duration_s: float | None = None,
    display: Display = "lines",
    console: Console | None = None,
    sinks: list[FleetSink] | None = None,
    forget_after_s: float = FORGET_AFTER_S,
    stop_when: Callable[[AnyFleetEvent], bool] | None = None,
) -> FleetOutcome:
    """Watch the fleet until `duration_s` (None: until interrupted) or `stop_when(event)`."""
    console = console or Console()
    outcome = FleetOutcome()
    all_sinks: list[FleetSink] = [outcome, *(sinks or [])]
    view = FleetDashboard(client.url)
    with contextlib.ExitStack() as stack:
        if out_dir is not None:
            writer = FleetWriter(
                out_dir / FLEET_FILE, client.url, query.selector, query.group_by, config.interval_s
            )
            stack.callback(writer.close)
            all_sinks.append(writer)
        if display == "lines":
            all_sinks.append(FleetLines(console))
        elif display == "live":
            all_sinks.append(view)
        events = watch_fleet(
            client, query, config, duration_s=duration_s, forget_after_s=forget_after_s
        )
        live = (lambda: live_dashboard(view, console)) if display == "live" else None
        await consume(events, all_sinks, view=live, stop_when=stop_when)
    return outcome
