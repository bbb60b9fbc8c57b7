"""One arm's directory, written by one object whichever driver moved the arm.

`ArmRecorder.open` writes kit.json and the starting meta.json; the driver then appends turns
through `recorder.turns` and hands every monitor event to `recorder.event`, which sends it
through the arm's one list of sinks: the timeline first, then whatever the driver added (the
forensics bundle, the exporter, `--on-stall`, the live view). `close_sinks` waits for the
sinks that work in the background (bundles, on-stall commands) and closes the timeline;
`finish` closes meta.json from the driver's typed `ArmEnd` and writes summary.json. The HTTP
arm (`stallkit.kits.arm.wall`) and the virtual-clock arm (`stallkit.kits.arm.virtual`) both write their directory here,
so the two can only differ in what their engine did.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stallkit.contract.files import KIT_FILE, META_FILE, SUMMARY_FILE, TIMELINE_FILE, TURNS_FILE
from stallkit.contract.jsonl import write_json
from stallkit.contract.kitfile import KitFile
from stallkit.contract.meta import ArmMeta, Clock, EndReason, EngineCapabilities, EngineKind
from stallkit.contract.records import read_records
from stallkit.contract.summary import summarize
from stallkit.kits.kit import Kit
from stallkit.loadgen import RecordWriter, trace_replay
from stallkit.monitor import MonitorEvent, Sink, TimelineWriter

__all__ = ["ArmEnd", "ArmRecorder", "error_line"]

#: Wall seconds a virtual arm's turns and timeline lines may wait in the buffer.
VIRTUAL_FLUSH_S = 0.2
#: Streamed chunks of a virtual arm's turn records kept in memory for its summary (past
#: that, the summary reads turns.jsonl back, as an HTTP arm's does)
VIRTUAL_KEEP_CHUNKS = 1_000_000


def error_line(exc: BaseException) -> str:
    """The first line of what ended an arm (its type when it says nothing)."""
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class ArmEnd:
    """How an arm ended, as its driver measured it: the closing half of meta.json."""

    reason: EndReason
    error: str | None = None
    #: wall seconds the load ran (for a virtual arm: the wall seconds its computation took)
    wall_s: float = 0.0
    #: engine seconds the load ran (None: the engine's clock was not read)
    engine_s: float | None = None
    #: wall seconds a virtual arm took to compute (None on the wall clock)
    compute_wall_s: float | None = None


class ArmRecorder:
    """Owns one arm directory: kit.json, meta.json, turns, the timeline and the summary."""

    def __init__(self, arm_dir: Path, kit: Kit, meta: ArmMeta) -> None:
        arm_dir.mkdir(parents=True, exist_ok=True)
        self.dir = arm_dir
        self.meta = meta
        write_json(arm_dir / KIT_FILE, KitFile.of(kit.model_dump(mode="json"), meta.time_scale))
        write_json(arm_dir / META_FILE, meta)
        # a virtual arm writes thousands of lines per wall second: flushed a few times a second
        # (and at the end, however it ends) rather than each
        flush_s = VIRTUAL_FLUSH_S if meta.clock == "virtual" else 0.0
        # a virtual arm's records are few and small: kept, to summarise without reading back
        keep = VIRTUAL_KEEP_CHUNKS if meta.clock == "virtual" else 0
        self.turns = RecordWriter(arm_dir / TURNS_FILE, flush_s, keep_chunks=keep)
        self.timeline = TimelineWriter(arm_dir / TIMELINE_FILE, flush_s)
        self._sinks: list[Sink] = [self.timeline]
        self._closers: list[Callable[[], None]] = []

    @classmethod
    def open(
        cls,
        arm_dir: Path,
        kit: Kit,
        *,
        arm: str,
        spec: str,
        kind: EngineKind,
        clock: Clock,
        time_scale: float,
        capabilities: EngineCapabilities | None = None,
    ) -> ArmRecorder:
        """Start the arm's directory (kit.json and meta.json with end_reason "starting")."""
        meta = ArmMeta.starting(
            arm=arm,
            spec=spec,
            kind=kind,
            clock=clock,
            capabilities=capabilities,
            seed=kit.load.seed,
            time_scale=time_scale,
            planned_duration_s=kit.load.duration_s,
            started_at=datetime.now(UTC).isoformat(),
            trace=trace_replay(kit.load),
        )
        return cls(arm_dir, kit, meta)

    def add(self, sink: Sink, close: Callable[[], None] | None = None) -> None:
        """One more consumer of the arm's monitor events (`close` runs in `close_sinks`)."""
        self._sinks.append(sink)
        if close is not None:
            self._closers.append(close)

    def event(self, event: MonitorEvent) -> None:
        """Send one monitor event through every sink, in the order they were added."""
        for sink in self._sinks:
            sink.handle(event)

    def close_sinks(self) -> None:
        """Wait for the sinks still working (bundles, on-stall commands); close the timeline."""
        for close in self._closers:
            with contextlib.suppress(Exception):
                close()
        self._closers.clear()
        self.timeline.close()

    def finish(self, end: ArmEnd) -> ArmMeta:
        """Close turns and meta.json from `end`, then write summary.json; the final meta."""
        self.close_sinks()
        self.turns.close()
        wall_s = round(end.wall_s, 3)
        changes: dict[str, Any] = {
            "end_reason": end.reason,
            "error": end.error,
            "stopped_by_monitor": end.reason == "stall_stop",
            "wall_s": wall_s,
            "compute_wall_s": end.compute_wall_s,
            "finished_at": datetime.now(UTC).isoformat(),
        }
        if end.engine_s is not None:
            changes["engine_s"] = engine_s = round(end.engine_s, 3)
            if self.meta.clock == "wall":  # what a virtual arm measures is its compute speed
                changes["engine_s_per_wall_s"] = round(engine_s / max(wall_s, 1e-9), 2)
        # meta.json first: the arm's end is recorded even if the summary then fails
        self.meta = self.meta.update(**changes)
        write_json(self.dir / META_FILE, self.meta)
        turns = self.dir / TURNS_FILE
        records = self.turns.kept
        if records is None:
            records = read_records(turns) if turns.exists() else []
        summary = summarize(records).model_copy(update={"time_scale": self.meta.time_scale})
        write_json(self.dir / SUMMARY_FILE, summary)
        return self.meta
