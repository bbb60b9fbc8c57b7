"""What a run does when a stall happens: the exporter, `--on-stall` and the forensics bundle.

`Alerting.start(...)` validates the flags and binds the metrics port before any engine
starts (a busy port or a missing on-stall command is a one-line error); `for_arm(...)`
gives one arm's event consumer, which the arm feeds every monitor event and closes at the
end. Forensics are always on; the exporter and the command only when asked for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stallkit.engine import EngineSpec, Launcher
from stallkit.kits.arm.kinds import kind_of
from stallkit.monitor import (
    EngineTarget,
    ForensicsCollector,
    MonitorEvent,
    OnStallCommand,
    OnStallRunner,
    Sink,
    StallExporter,
)


@dataclass
class Alerting:
    """The run-wide pieces: one exporter for every arm (told apart by the `arm` label).
    Forensics need no setting: every arm keeps its bundles."""

    exporter: StallExporter | None = None
    on_stall: OnStallCommand | None = None
    metrics_url: str | None = None

    @classmethod
    def start(
        cls,
        metrics_port: int | None,
        metrics_host: str,
        on_stall: str | None,
        on_stall_end: bool = False,
        on_stall_timeout_s: float = 60.0,
    ) -> Alerting:
        """Check the command and serve the exporter now (raises `MonitorError`)."""
        command = None
        if on_stall is not None:
            command = OnStallCommand.parse(on_stall, on_stall_timeout_s, on_stall_end)
        exporter = None
        url = None
        if metrics_port is not None:
            exporter = StallExporter()
            port = exporter.serve(metrics_host, metrics_port)
            host = f"[{metrics_host}]" if ":" in metrics_host else metrics_host
            url = f"http://{host}:{port}/metrics"
        return cls(exporter, command, url)

    def for_arm(
        self,
        arm: str,
        spec: EngineSpec,
        arm_dir: Path,
        launcher: Launcher,
        stall_after_s: float,
    ) -> ArmAlerting:
        """One arm's consumer of monitor events."""
        url = launcher.url
        sinks = ArmAlerting()
        if self.exporter is not None:
            sinks.parts.append(self.exporter.sink(url, arm))
        log = arm_dir / "engine.log"
        target = EngineTarget(
            kind_of(spec).target,
            pids=launcher.pids,
            container=getattr(launcher, "name", None) if kind_of(spec).image else None,
            log_path=log if log.exists() else None,
        )
        collector = ForensicsCollector(arm_dir, url, target, stall_after_s)
        sinks.parts.append(collector)
        sinks.closers.append(collector.close)
        if self.on_stall is not None:
            runner = OnStallRunner(self.on_stall, arm_dir, url, arm)
            sinks.parts.append(runner)
            sinks.closers.append(runner.close)
        return sinks

    def for_url(self, url: str, out_dir: Path, stall_after_s: float) -> ArmAlerting:
        """The consumer for `kit monitor` on an engine it did not start (no stack dumps)."""
        sinks = ArmAlerting()
        if self.exporter is not None:
            sinks.parts.append(self.exporter.sink(url.rstrip("/"), "monitor"))
        collector = ForensicsCollector(out_dir, url, EngineTarget("remote"), stall_after_s)
        sinks.parts.append(collector)
        sinks.closers.append(collector.close)
        if self.on_stall is not None:
            runner = OnStallRunner(self.on_stall, out_dir, url, "monitor")
            sinks.parts.append(runner)
            sinks.closers.append(runner.close)
        return sinks

    def for_fleet_engine(
        self, engine: str, labels: Mapping[str, str], out_dir: Path, t0_unix: float
    ) -> list[Sink]:
        """One engine of a fleet watched through Prometheus: its exporter series (labelled
        `engine` = its group label's value, `arm` = fleet) and its `--on-stall` runner (the
        engine's labels in the command's environment). No forensics: the engine is remote."""
        sinks: list[Sink] = []
        if self.exporter is not None:
            sinks.append(self.exporter.sink(engine, "fleet"))
        if self.on_stall is not None:
            where = out_dir / "engines" / _safe(engine)
            sinks.append(
                OnStallRunner(self.on_stall, where, engine, "fleet", labels=labels, t0_unix=t0_unix)
            )
        return sinks

    def close(self) -> None:
        """Stop the exporter."""
        if self.exporter is not None:
            self.exporter.close()


def _safe(name: str) -> str:
    """A directory name for an engine (`host:port`, a pod name): unsafe characters as `_`."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "_"


@dataclass
class ArmAlerting:
    """Hands each event to the exporter, forensics and on-stall consumers of one arm."""

    parts: list[Sink] = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)

    def handle(self, event: MonitorEvent) -> None:
        for part in self.parts:
            part.handle(event)

    def close(self) -> None:
        """Wait for the bundles and commands still running."""
        for close in self.closers:
            with contextlib.suppress(Exception):
                close()
