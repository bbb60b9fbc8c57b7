"""Backtest: the detector replayed over a fleet's history, and what it found. Pure.

`replay_engine()` feeds one engine's readings, in time order, through the fleet bank (the
same `MonitorStep` and detector as the live watch); `BacktestTally` consumes the events and
keeps every stall (kind, onset, when it was judged, end, and what the engine showed at the
onset: running, waiting, KV, the busiest GPU) and each engine's exposure: the seconds
between consecutive successful scrapes, so the hours an engine was down or not yet there do
not dilute its rate. `backtest_file()` sums it up per engine and for the fleet as stalls per
engine-hour. A stall still holding at the end of the range is kept with no end (censored),
its duration counted to the range's end. Times are the readings' own (Unix seconds).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from stallkit.contract.fleet import BacktestEngine, BacktestFile, BacktestStall
from stallkit.monitor.detect.events import Down, GpuReading, Sample, StallEnded, StallStarted
from stallkit.monitor.fleet.bank import EngineAppeared, EngineEvent, FleetBank, FleetEvent
from stallkit.monitor.prometheus.queries import Reading


@dataclass
class _Engine:
    labels: dict[str, str] = field(default_factory=dict)
    samples: int = 0
    downs: int = 0
    exposure_s: float = 0.0
    last_sample_t: float | None = None
    gpu_t: list[float] = field(default_factory=list)
    gpu_max: list[float] = field(default_factory=list)
    open: list[BacktestStall] = field(default_factory=list)
    closed: list[BacktestStall] = field(default_factory=list)


def _gpu_at(engine: _Engine, t: float) -> float | None:
    """The busiest GPU's utilisation in the last reading at or before `t`."""
    i = bisect.bisect_right(engine.gpu_t, t)
    return engine.gpu_max[i - 1] if i else None


class BacktestTally:
    """Every stall and each engine's exposure, from fleet events in each engine's time order."""

    def __init__(self) -> None:
        self._engines: dict[str, _Engine] = {}

    def handle(self, event: FleetEvent) -> None:
        """Tally one event."""
        match event:
            case EngineAppeared(engine=key, labels=labels):
                self._engines.setdefault(key, _Engine()).labels = dict(labels)
            case EngineEvent(engine=key, event=inner):
                self._engine_event(self._engines.setdefault(key, _Engine()), key, inner)

    def _engine_event(self, e: _Engine, key: str, event: object) -> None:
        match event:
            case Sample(t=t):
                e.samples += 1
                if e.last_sample_t is not None:
                    e.exposure_s += t - e.last_sample_t
                e.last_sample_t = t
            case Down():
                e.downs += 1
                e.last_sample_t = None
            case GpuReading(t=t, util=util) if util:
                e.gpu_t.append(t)
                e.gpu_max.append(max(util.values()))
                if len(e.gpu_t) > 4096:  # only readings near an onset are ever looked up
                    del e.gpu_t[:2048], e.gpu_max[:2048]
            case StallStarted(t=t, onset=onset, kind=kind, onset_snapshot=snap):
                e.open.append(
                    BacktestStall(
                        engine=key, kind=kind, onset=round(onset, 3), judged=round(t, 3),
                        end=None, duration_s=round(t - onset, 3), running=snap.running,
                        waiting=snap.waiting, kv_usage=snap.kv_usage,
                        gpu_util_max=_gpu_at(e, onset),
                    )
                )  # fmt: skip
            case StallEnded(t=t, onset=onset, kind=kind, duration_s=duration_s) if e.open:
                started = e.open.pop(0)
                e.closed.append(
                    started.model_copy(
                        update={
                            "kind": kind,
                            "end": round(t, 3),
                            "duration_s": round(duration_s, 3),
                        }
                    )
                )

    def stalls(self, end: float) -> list[BacktestStall]:
        """Every stall, by onset; one still open at `end` has no end, its duration to `end`."""
        out: list[BacktestStall] = []
        for e in self._engines.values():
            out.extend(e.closed)
            out.extend(
                s.model_copy(update={"duration_s": round(max(end - s.onset, 0.0), 3)})
                for s in e.open
            )
        return sorted(out, key=lambda s: (s.onset, s.engine))

    def engines(self, end: float) -> list[BacktestEngine]:
        """Each engine's tally, most stalls first."""
        by_engine: dict[str, list[BacktestStall]] = {}
        for stall in self.stalls(end):
            by_engine.setdefault(stall.engine, []).append(stall)
        rows = []
        for key, e in self._engines.items():
            stalls = by_engine.get(key, [])
            hours = e.exposure_s / 3600
            rows.append(
                BacktestEngine(
                    engine=key, labels=e.labels, samples=e.samples, downs=e.downs,
                    exposure_s=round(e.exposure_s, 3), stalls=len(stalls),
                    stalled_s=round(sum(s.duration_s for s in stalls), 3),
                    stalls_per_engine_hour=round(len(stalls) / hours, 4) if hours > 0 else None,
                )
            )  # fmt: skip
        return sorted(rows, key=lambda r: (-r.stalls, r.engine))


def replay_engine(
    bank: FleetBank, key: str, points: Mapping[float, Reading], labels: Mapping[str, str]
) -> list[FleetEvent]:
    """One engine's readings (query time -> reading) through the bank, in time order."""
    events: list[FleetEvent] = []
    for at in sorted(points):
        events.extend(bank.feed(key, points[at], labels))
    return events


def fill_gaps(
    points: Mapping[float, Reading], grid: Iterable[float], seen_from: float | None
) -> dict[float, Reading]:
    """An engine's points on a range query's grid, a down reading where it had no series
    (from the first time it was seen on: before that it did not exist yet)."""
    out = dict(points)
    first = min(points) if points else None
    start = seen_from if seen_from is not None else first
    if start is None:
        return out
    for at in grid:
        if at >= start and at not in out:
            out[at] = Reading(at, None, "no series in Prometheus")
    return out


def backtest_file(
    tally: BacktestTally,
    *,
    source: str,
    selector: str,
    group_by: str,
    start: float,
    end: float,
    step_s: float | None,
    stall_after_s: float,
    wall_s: float,
) -> BacktestFile:
    """The report's figures: per engine, and the fleet's stalls per engine-hour."""
    engines = tally.engines(end)
    stalls = tally.stalls(end)
    by_kind: dict[str, int] = {}
    for stall in stalls:
        by_kind[stall.kind] = by_kind.get(stall.kind, 0) + 1
    hours = sum(e.exposure_s for e in engines) / 3600
    return BacktestFile(
        source=source, selector=selector, group_by=group_by, start=start, end=end,
        step_s=step_s, stall_after_s=stall_after_s, engines=engines, stalls=len(stalls),
        stalls_by_kind=by_kind, engine_hours=round(hours, 4),
        stalls_per_engine_hour=round(len(stalls) / hours, 4) if hours > 0 else None,
        wall_s=round(wall_s, 3),
    )  # fmt: skip
