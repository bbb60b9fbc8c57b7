"""Scrape vLLM metrics and GPU telemetry, detect stalls, show them live.

The names below are the package's public face, for the orchestration: the monitor's
settings, the monitor session and its typed events, the stall detector, GPU readers, the
timeline writer, the dashboard, the exporter, forensics, on-stall commands and the alert
rules. Each is imported from its module on first use, so `import monitor` itself imports
nothing. The watch loop itself is `monitor.watch.watch`: a face cannot carry a name that
is also one of its package's modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.faces import lazy_face

if TYPE_CHECKING:
    from monitor.config import MonitorConfig, monitor_config
    from monitor.dashboard import Dashboard, LogLines, fmt_s, live_dashboard
    from monitor.detector import StallDetector
    from monitor.errors import MonitorError
    from monitor.events import (
        GpuReading,
        MonitorEvent,
        Sample,
        StallStarted,
        StopRequested,
        Verdict,
    )
    from monitor.exporter import StallExporter
    from monitor.forensics import EngineTarget, ForensicsCollector, TargetKind
    from monitor.gpu import GpuReader, gpu_source, probe_engine_dcgm
    from monitor.onstall import OnStallCommand, OnStallRunner
    from monitor.parse import EngineMetrics, MetricsSnapshot, SimClock, parse_metrics
    from monitor.rates import snapshot_deltas
    from monitor.rules import RulesSettings, rules_yaml
    from monitor.session import Sink, run_monitor
    from monitor.step import MonitorStep
    from monitor.timeline import TimelineWriter

#: public name -> the module that defines it
_LAZY = {
    "MonitorConfig": "monitor.config",
    "monitor_config": "monitor.config",
    "MonitorError": "monitor.errors",
    "Sink": "monitor.session",
    "run_monitor": "monitor.session",
    "MonitorStep": "monitor.step",
    "GpuReading": "monitor.events",
    "MonitorEvent": "monitor.events",
    "Sample": "monitor.events",
    "StallStarted": "monitor.events",
    "StopRequested": "monitor.events",
    "Verdict": "monitor.events",
    "StallDetector": "monitor.detector",
    "EngineMetrics": "monitor.parse",
    "MetricsSnapshot": "monitor.parse",
    "parse_metrics": "monitor.parse",
    "SimClock": "monitor.parse",
    "snapshot_deltas": "monitor.rates",
    "GpuReader": "monitor.gpu",
    "gpu_source": "monitor.gpu",
    "probe_engine_dcgm": "monitor.gpu",
    "TimelineWriter": "monitor.timeline",
    "Dashboard": "monitor.dashboard",
    "LogLines": "monitor.dashboard",
    "fmt_s": "monitor.dashboard",
    "live_dashboard": "monitor.dashboard",
    "StallExporter": "monitor.exporter",
    "EngineTarget": "monitor.forensics",
    "ForensicsCollector": "monitor.forensics",
    "TargetKind": "monitor.forensics",
    "OnStallCommand": "monitor.onstall",
    "OnStallRunner": "monitor.onstall",
    "RulesSettings": "monitor.rules",
    "rules_yaml": "monitor.rules",
}

__all__ = [
    "Dashboard",
    "EngineMetrics",
    "EngineTarget",
    "ForensicsCollector",
    "GpuReader",
    "GpuReading",
    "LogLines",
    "MetricsSnapshot",
    "MonitorConfig",
    "MonitorError",
    "MonitorEvent",
    "MonitorStep",
    "OnStallCommand",
    "OnStallRunner",
    "RulesSettings",
    "Sample",
    "SimClock",
    "Sink",
    "StallDetector",
    "StallExporter",
    "StallStarted",
    "StopRequested",
    "TargetKind",
    "TimelineWriter",
    "Verdict",
    "fmt_s",
    "gpu_source",
    "live_dashboard",
    "monitor_config",
    "parse_metrics",
    "probe_engine_dcgm",
    "rules_yaml",
    "run_monitor",
    "snapshot_deltas",
]

if not TYPE_CHECKING:  # mypy reads the imports above; at run time names load on first use
    __getattr__, __dir__ = lazy_face(__name__, _LAZY)
