"""The monitor's own metrics: the detector's state per watched engine, served for Prometheus.

`StallExporter` owns a private prometheus_client registry (never the global one) and serves
it on loopback unless told otherwise; `exporter.sink(url, arm)` is a consumer of the monitor's
typed events (like the dashboard and the timeline writer) that keeps one engine's series up
to date. Every series carries the labels `engine` (its base URL) and `arm`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from stallkit.contract import names
from stallkit.contract.timeline import STALL_KINDS, StallKind
from stallkit.monitor.detect.events import (
    Down,
    GpuReading,
    MonitorEvent,
    Sample,
    StallEnded,
    StallOngoing,
    StallStarted,
    Up,
)
from stallkit.monitor.errors import MonitorError

_L = ("engine", "arm")


class StallExporter:
    """The `stallkit_*` series of every engine watched by this process."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._clock = clock
        self._server: Any = None
        self.port: int | None = None
        r = self.registry
        self.stall_active = Gauge(
            names.STALL_ACTIVE, "1 while a stall of this kind holds", [*_L, "kind"], registry=r
        )
        self.stall_seconds = Gauge(
            names.STALL_DURATION,
            "Seconds since the current stall's onset (0 without a stall)",
            _L,
            registry=r,
        )
        self.stalls = Counter(names.STALLS, "Stalls started, by kind", [*_L, "kind"], registry=r)
        self.gen_rate = Gauge(
            names.GENERATION_TOKENS_PER_SECOND,
            "Generated tokens per second in the last sample",
            _L,
            registry=r,
        )
        self.running = Gauge(
            names.REQUESTS_RUNNING, "Running requests, last sample", _L, registry=r
        )
        self.waiting = Gauge(
            names.REQUESTS_WAITING, "Waiting requests, last sample", _L, registry=r
        )
        self.kv = Gauge(
            names.KV_CACHE_USAGE_RATIO, "KV cache usage (0..1), last sample", _L, registry=r
        )
        self.gpu = Gauge(
            names.GPU_UTILIZATION,
            "GPU utilisation (%), last reading",
            [*_L, "gpu"],
            registry=r,
        )
        self.failures = Counter(names.SCRAPE_FAILURES, "Failed /metrics scrapes", _L, registry=r)
        self.up = Gauge(
            names.ENGINE_UP, "1 when the last /metrics scrape succeeded", _L, registry=r
        )
        self.last_sample = Gauge(
            names.LAST_SAMPLE_TIMESTAMP,
            "Unix time of the last successful scrape",
            _L,
            registry=r,
        )

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve /metrics on `host:port` (0 = any free port) in a thread; the bound port."""
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise MonitorError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}",
                hint="pick another --metrics-port (0 = any free port)",
            ) from None
        self._server = server
        self.port = int(server.server_address[1])
        return self.port

    def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def sink(self, engine: str, arm: str) -> ExporterSink:
        """A consumer of one engine's monitor events."""
        return ExporterSink(self, engine, arm)


class ExporterSink:
    """Keeps one engine's series in step with its monitor events."""

    def __init__(self, exporter: StallExporter, engine: str, arm: str) -> None:
        self._x = exporter
        self._labels = {"engine": engine, "arm": arm}
        x = exporter
        for kind in STALL_KINDS:
            x.stall_active.labels(**self._labels, kind=kind).set(0)
            x.stalls.labels(**self._labels, kind=kind)
        x.stall_seconds.labels(**self._labels).set(0)
        x.failures.labels(**self._labels)
        x.up.labels(**self._labels).set(0)

    def handle(self, event: MonitorEvent) -> None:
        """Update the series from one event."""
        x, lab = self._x, self._labels
        match event:
            case Sample(snapshot=snap):
                x.up.labels(**lab).set(1)
                x.last_sample.labels(**lab).set(x._clock())
                x.gen_rate.labels(**lab).set(event.gen_tok_s)
                x.running.labels(**lab).set(snap.running or 0)
                x.waiting.labels(**lab).set(snap.waiting or 0)
                if snap.kv_usage is not None:
                    x.kv.labels(**lab).set(snap.kv_usage)
            case Down():
                x.up.labels(**lab).set(0)
                x.failures.labels(**lab).inc()
            case Up():
                x.up.labels(**lab).set(1)
            case GpuReading(util=util, error=None):
                for gpu, value in util.items():
                    x.gpu.labels(**lab, gpu=gpu).set(value)
            case StallStarted():
                x.stalls.labels(**lab, kind=event.kind).inc()
                self._active(event.kind)
                x.stall_seconds.labels(**lab).set(event.t - event.onset)
            case StallOngoing():
                self._active(event.kind)
                x.stall_seconds.labels(**lab).set(event.duration_s)
            case StallEnded():
                self._active(None)
                x.stall_seconds.labels(**lab).set(0)

    def _active(self, kind: StallKind | None) -> None:
        for k in STALL_KINDS:
            self._x.stall_active.labels(**self._labels, kind=k).set(1 if k == kind else 0)
