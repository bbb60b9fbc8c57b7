"""Consumers of fleet events: the tally, `fleet.jsonl`, plain log lines, per-engine sinks.

Each has `handle(event)`, like the one-engine monitor's sinks. `PerEngine` gives every
engine its own sinks (the exporter's series, an `--on-stall` runner with the engine's
labels) made when it appears, and hands each of them only that engine's monitor events.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from stallkit.contract.fleet import (
    EngineAppearedLine,
    EngineLine,
    EngineVanishedLine,
    FleetStartedLine,
    QueryFailedLine,
)
from stallkit.contract.jsonl import JsonlWriter
from stallkit.monitor.detect.events import (
    Down,
    Sample,
    StallEnded,
    StallStarted,
    StopRequested,
    Up,
    Verdict,
)
from stallkit.monitor.fleet.bank import (
    EngineAppeared,
    EngineEvent,
    EngineVanished,
    QueryFailed,
)
from stallkit.monitor.fleet.watch import AnyFleetEvent, CycleDone, FleetStart
from stallkit.monitor.live.loop import EventSink
from stallkit.monitor.live.session import Sink
from stallkit.monitor.live.timeline import event_line

#: Anything that consumes fleet events (has `handle(event)`).
FleetSink = EventSink[AnyFleetEvent]


@dataclass
class FleetOutcome:
    """What a fleet watch saw."""

    engines: set[str] = field(default_factory=set)
    samples: int = 0
    downs: int = 0
    failed_queries: int = 0
    stalls: list[tuple[str, StallStarted]] = field(default_factory=list)
    vanished: set[str] = field(default_factory=set)

    def handle(self, event: AnyFleetEvent) -> None:
        """Tally one event."""
        match event:
            case EngineAppeared(engine=engine):
                self.engines.add(engine)
            case EngineVanished(engine=engine):
                self.vanished.add(engine)
            case QueryFailed():
                self.failed_queries += 1
            case EngineEvent(engine=engine, event=Sample()):
                self.samples += 1
            case EngineEvent(event=Down()):
                self.downs += 1
            case EngineEvent(engine=engine, event=StallStarted() as started):
                self.stalls.append((engine, started))

    def stalled_engines(self) -> dict[str, set[str]]:
        """Engine -> the kinds of stall it had."""
        out: dict[str, set[str]] = {}
        for engine, started in self.stalls:
            out.setdefault(engine, set()).add(started.kind)
        return out


class FleetWriter:
    """Appends `fleet.jsonl`'s lines as events happen (no samples: a fleet writes a lot)."""

    def __init__(self, path: Path, source: str, selector: str, group_by: str, interval_s: float):
        self.path = path
        self._writer = JsonlWriter(path)
        self._head = (source, selector, group_by, interval_s)

    def handle(self, event: AnyFleetEvent) -> None:
        """Write the event's line, if it has one."""
        source, selector, group_by, interval_s = self._head
        match event:
            case FleetStart(t0_unix=t0):
                self._writer.write(
                    FleetStartedLine(
                        t0_unix=round(t0, 3),
                        source=source,
                        selector=selector,
                        group_by=group_by,
                        interval_s=interval_s,
                    )
                )
            case EngineAppeared(t=t, engine=engine, labels=labels):
                self._writer.write(
                    EngineAppearedLine(t=round(t, 3), engine=engine, labels=dict(labels))
                )
            case EngineVanished(t=t, engine=engine):
                self._writer.write(EngineVanishedLine(t=round(t, 3), engine=engine))
            case QueryFailed(t=t, error=error):
                self._writer.write(QueryFailedLine(t=round(t, 3), error=error))
            case EngineEvent(engine=engine, event=inner) if not isinstance(inner, Sample):
                line = event_line(inner)
                if line is not None and line.type != "gpu":
                    self._writer.write(EngineLine(engine=engine, line=line))

    def close(self) -> None:
        """Close the file."""
        self._writer.close()


class FleetLines:
    """Plain lines: every stall start/end, outage, appearance after the first summary (a fleet
    of a thousand starts with one line, not a thousand); a fleet summary every `every_s`."""

    def __init__(self, console: Console, *, every_s: float = 10.0) -> None:
        self.console = console
        self.every_s = every_s
        self._status: dict[str, str] = {}
        self._last_summary: float | None = None
        self._down: set[str] = set()

    def _print(self, t: float, text: str) -> None:
        self.console.print(f"[{t:8.1f}s] {text}", markup=False, highlight=False, soft_wrap=True)

    def handle(self, event: AnyFleetEvent) -> None:
        """Print what deserves a line."""
        match event:
            case EngineAppeared(t=t, engine=engine) if self._last_summary is not None:
                self._print(t, f"{engine}: appeared")  # the first ones: in the first summary
            case EngineVanished(t=t, engine=engine):
                self._status.pop(engine, None)
                self._print(t, f"{engine}: vanished")
            case QueryFailed(t=t, error=error):
                self._print(t, f"query failed: {error}")
            case CycleDone(t=t):
                self._summary(t)
            case EngineEvent(engine=engine, event=inner):
                self._engine(engine, inner)

    def _engine(self, engine: str, event: object) -> None:
        match event:
            case Verdict(state=state):
                self._status[engine] = state.status
            case Down(t=t, error=error) if engine not in self._down:
                self._down.add(engine)
                self._print(t, f"{engine}: down: {error}")
            case Up(t=t):
                self._down.discard(engine)
                self._print(t, f"{engine}: up again")
            case StallStarted(t=t, onset=onset, kind=kind, evidence=evidence):
                said = f" ({evidence.words()})" if evidence else ""
                self._print(t, f"{engine}: STALL started: {kind}{said}, onset t={onset:.1f}s")
            case StallEnded(t=t, kind=kind, duration_s=duration):
                self._print(t, f"{engine}: stall ended: {kind}, lasted {duration:.1f} s")
            case StopRequested(t=t, stall_s=stall_s):
                self._print(t, f"{engine}: stall has lasted {stall_s:.1f} s")

    def _summary(self, t: float) -> None:
        if self._last_summary is not None and t - self._last_summary < self.every_s:
            return
        self._last_summary = t
        self._print(t, f"fleet: {summary_text(self._status)}")


def summary_text(statuses: Mapping[str, str]) -> str:
    """`12 engines: 2 stalled, 1 down, 9 ok` (the states present, worst first)."""
    order = ("stalled", "suspect", "down", "starting", "ok", "idle")
    counts = {s: sum(1 for v in statuses.values() if v == s) for s in order}
    parts = [f"{n} {s}" for s, n in counts.items() if n]
    return f"{len(statuses)} engines" + (": " + ", ".join(parts) if parts else "")


class PerEngine:
    """Gives each engine its own sinks when it appears (`make(engine, labels)`)."""

    def __init__(self, make: Callable[[str, Mapping[str, str]], list[Sink]]) -> None:
        self._make = make
        self._sinks: dict[str, list[Sink]] = {}

    def handle(self, event: AnyFleetEvent) -> None:
        """Route one engine's events to its sinks."""
        match event:
            case EngineAppeared(engine=engine, labels=labels):
                self._sinks[engine] = self._make(engine, labels)
            case EngineEvent(engine=engine, event=inner):
                for sink in self._sinks.get(engine, ()):
                    sink.handle(inner)

    def close(self) -> None:
        """Close every sink that closes (on-stall commands still running end by their own
        timeouts)."""
        for sinks in self._sinks.values():
            for sink in sinks:
                close = getattr(sink, "close", None)
                if close is not None:
                    with contextlib.suppress(Exception):
                        close()
