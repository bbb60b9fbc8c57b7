"""Scrape vLLM metrics and GPU telemetry, detect stalls, show them live.

The names below are the package's public face, for the orchestration: the monitor's
settings, the monitor session and its typed events, the stall detector, GPU readers, the
timeline writer, the dashboard, the exporter, forensics, on-stall commands, the alert
rules, and a fleet's watch through Prometheus and its backtest. Each is imported from its
module on first use, so `import monitor` itself imports nothing. The watch loop itself is `monitor.watch.watch`: a face cannot carry a name that
is also one of its package's modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.faces import public_face

if TYPE_CHECKING:  # the face, once: each name and its module (run time: loaded on first use)
    from monitor.backtest import BacktestTally as BacktestTally
    from monitor.backtest import backtest_file as backtest_file
    from monitor.backtestrun import backtest_openmetrics as backtest_openmetrics
    from monitor.backtestrun import backtest_prometheus as backtest_prometheus
    from monitor.backtestrun import replay_alerts as replay_alerts
    from monitor.config import MonitorConfig as MonitorConfig
    from monitor.config import monitor_config as monitor_config
    from monitor.dashboard import Dashboard as Dashboard
    from monitor.dashboard import LogLines as LogLines
    from monitor.dashboard import fmt_s as fmt_s
    from monitor.dashboard import live_dashboard as live_dashboard
    from monitor.detector import StallDetector as StallDetector
    from monitor.errors import MonitorError as MonitorError
    from monitor.events import GpuReading as GpuReading
    from monitor.events import MonitorEvent as MonitorEvent
    from monitor.events import Sample as Sample
    from monitor.events import StallStarted as StallStarted
    from monitor.events import StopRequested as StopRequested
    from monitor.events import Verdict as Verdict
    from monitor.exporter import StallExporter as StallExporter
    from monitor.fleet import EngineEvent as EngineEvent
    from monitor.fleet import FleetBank as FleetBank
    from monitor.fleet import FleetEvent as FleetEvent
    from monitor.fleetsession import run_fleet as run_fleet
    from monitor.fleetsinks import AnyFleetEvent as AnyFleetEvent
    from monitor.fleetsinks import FleetOutcome as FleetOutcome
    from monitor.fleetsinks import PerEngine as PerEngine
    from monitor.fleetwatch import FleetStart as FleetStart
    from monitor.forensics import EngineTarget as EngineTarget
    from monitor.forensics import ForensicsCollector as ForensicsCollector
    from monitor.forensics import TargetKind as TargetKind
    from monitor.gpu import GpuReader as GpuReader
    from monitor.gpu import gpu_source as gpu_source
    from monitor.gpu import probe_engine_dcgm as probe_engine_dcgm
    from monitor.onstall import OnStallCommand as OnStallCommand
    from monitor.onstall import OnStallRunner as OnStallRunner
    from monitor.parse import EngineMetrics as EngineMetrics
    from monitor.parse import MetricsSnapshot as MetricsSnapshot
    from monitor.parse import SimClock as SimClock
    from monitor.parse import parse_metrics as parse_metrics
    from monitor.prometheus import PrometheusClient as PrometheusClient
    from monitor.promql import FleetQuery as FleetQuery
    from monitor.promql import label_name as label_name
    from monitor.promql import matchers as matchers
    from monitor.promql import parse_duration as parse_duration
    from monitor.promql import parse_time as parse_time
    from monitor.promseries import openmetrics_text as openmetrics_text
    from monitor.rates import snapshot_deltas as snapshot_deltas
    from monitor.rules import RulesSettings as RulesSettings
    from monitor.rules import rules_document as rules_document
    from monitor.rules import rules_yaml as rules_yaml
    from monitor.session import MonitorOutcome as MonitorOutcome
    from monitor.session import Sink as Sink
    from monitor.session import run_monitor as run_monitor
    from monitor.step import MonitorStep as MonitorStep
    from monitor.timeline import TimelineWriter as TimelineWriter

if not TYPE_CHECKING:
    __all__, __getattr__, __dir__ = public_face(__name__)
