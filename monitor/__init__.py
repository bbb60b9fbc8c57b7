"""Scrape vLLM metrics and GPU telemetry, detect stalls, show them live.

The names below are the package's public face, for the orchestration: the monitor's
settings, the monitor session and its typed events, the stall detector, GPU readers, the
timeline writer, the dashboard, the exporter, forensics, on-stall commands, the alert
rules, and a fleet's watch through Prometheus and its backtest. Each is imported from its
module on first use, so `import stallkit.monitor` itself imports nothing. The watch loop itself is `stallkit.monitor.live.watch.watch`: a face cannot carry a name that
is also one of its package's modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stallkit.contract.faces import public_face

if TYPE_CHECKING:  # the face, once: each name and its module (run time: loaded on first use)
    from stallkit.monitor.backtest.replay import BacktestTally as BacktestTally
    from stallkit.monitor.backtest.replay import backtest_file as backtest_file
    from stallkit.monitor.backtest.sources import backtest_openmetrics as backtest_openmetrics
    from stallkit.monitor.backtest.sources import backtest_prometheus as backtest_prometheus
    from stallkit.monitor.backtest.sources import history_text as history_text
    from stallkit.monitor.backtest.sources import replay_alerts as replay_alerts
    from stallkit.monitor.config import MonitorConfig as MonitorConfig
    from stallkit.monitor.config import monitor_config as monitor_config
    from stallkit.monitor.detect.detector import StallDetector as StallDetector
    from stallkit.monitor.detect.events import GpuReading as GpuReading
    from stallkit.monitor.detect.events import MonitorEvent as MonitorEvent
    from stallkit.monitor.detect.events import Sample as Sample
    from stallkit.monitor.detect.events import StallStarted as StallStarted
    from stallkit.monitor.detect.events import StopRequested as StopRequested
    from stallkit.monitor.detect.events import Verdict as Verdict
    from stallkit.monitor.detect.step import MonitorStep as MonitorStep
    from stallkit.monitor.errors import MonitorError as MonitorError
    from stallkit.monitor.fleet.bank import EngineEvent as EngineEvent
    from stallkit.monitor.fleet.bank import FleetBank as FleetBank
    from stallkit.monitor.fleet.bank import FleetEvent as FleetEvent
    from stallkit.monitor.fleet.session import run_fleet as run_fleet
    from stallkit.monitor.fleet.sinks import FleetOutcome as FleetOutcome
    from stallkit.monitor.fleet.sinks import PerEngine as PerEngine
    from stallkit.monitor.fleet.watch import AnyFleetEvent as AnyFleetEvent
    from stallkit.monitor.fleet.watch import FleetStart as FleetStart
    from stallkit.monitor.live.dashboard import Dashboard as Dashboard
    from stallkit.monitor.live.dashboard import LogLines as LogLines
    from stallkit.monitor.live.dashboard import fmt_s as fmt_s
    from stallkit.monitor.live.dashboard import live_dashboard as live_dashboard
    from stallkit.monitor.live.session import MonitorOutcome as MonitorOutcome
    from stallkit.monitor.live.session import Sink as Sink
    from stallkit.monitor.live.session import run_monitor as run_monitor
    from stallkit.monitor.live.timeline import TimelineWriter as TimelineWriter
    from stallkit.monitor.on_stall.command import OnStallCommand as OnStallCommand
    from stallkit.monitor.on_stall.command import OnStallRunner as OnStallRunner
    from stallkit.monitor.on_stall.exporter import StallExporter as StallExporter
    from stallkit.monitor.on_stall.forensics import EngineTarget as EngineTarget
    from stallkit.monitor.on_stall.forensics import ForensicsCollector as ForensicsCollector
    from stallkit.monitor.on_stall.forensics import TargetKind as TargetKind
    from stallkit.monitor.prometheus.client import PrometheusClient as PrometheusClient
    from stallkit.monitor.prometheus.queries import FleetQuery as FleetQuery
    from stallkit.monitor.prometheus.queries import label_name as label_name
    from stallkit.monitor.prometheus.queries import matchers as matchers
    from stallkit.monitor.prometheus.queries import parse_duration as parse_duration
    from stallkit.monitor.prometheus.queries import parse_time as parse_time
    from stallkit.monitor.prometheus.rules import RulesSettings as RulesSettings
    from stallkit.monitor.prometheus.rules import rules_document as rules_document
    from stallkit.monitor.prometheus.rules import rules_yaml as rules_yaml
    from stallkit.monitor.prometheus.series import openmetrics_text as openmetrics_text
    from stallkit.monitor.signals.dialects import Dialect as Dialect
    from stallkit.monitor.signals.dialects import dialect_named as dialect_named
    from stallkit.monitor.signals.gpu import GpuReader as GpuReader
    from stallkit.monitor.signals.gpu import gpu_source as gpu_source
    from stallkit.monitor.signals.gpu import probe_engine_dcgm as probe_engine_dcgm
    from stallkit.monitor.signals.gpu import resolve_gpu_source as resolve_gpu_source
    from stallkit.monitor.signals.parse import EngineMetrics as EngineMetrics
    from stallkit.monitor.signals.parse import MetricsSnapshot as MetricsSnapshot
    from stallkit.monitor.signals.parse import SimClock as SimClock
    from stallkit.monitor.signals.parse import parse_metrics as parse_metrics
    from stallkit.monitor.signals.rates import snapshot_deltas as snapshot_deltas
    from stallkit.monitor.signals.scrape import MetricsScraper as MetricsScraper
    from stallkit.monitor.signals.scrape import resolve_dialect as resolve_dialect

if not TYPE_CHECKING:
    __all__, __getattr__, __dir__ = public_face(__name__)
