"""The fleet's detector bank: one `MonitorStep` per engine, engines coming and going. Pure.

`FleetBank.observe(now, readings, labels)` takes what one query cycle (or one point of a
range) read of every engine, at `now` on the caller's clock, and returns typed fleet events:
each engine's own monitor events (the same `MonitorStep` and detector as `kit monitor` on one
engine, so every stall kind flows through untouched) tagged with the engine, plus the engine
appearing, and vanishing once its series have been gone for `forget_after_s`. A reading
whose scrape time is not newer than the engine's last one is skipped (Prometheus has not
scraped it again), so a query faster than the scrape interval never reads as "no progress".
An engine missing from an answer, or every engine when the query failed, is down at `now`
(not a stall). A target never seen with vLLM series (an exporter that only has `up`, an
engine down since before the watch began) is not an engine yet. Times are seconds on the caller's clock (since the monitor started, or Unix).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import MonitorEvent
from stallkit.monitor.detect.step import MonitorStep
from stallkit.monitor.prometheus.queries import Reading

#: Seconds an engine may be missing from Prometheus's answers before it is forgotten.
FORGET_AFTER_S = 300.0


@dataclass(frozen=True, slots=True)
class EngineEvent:
    """One engine's monitor event."""

    engine: str
    event: MonitorEvent

    @property
    def t(self) -> float:
        """The event's time."""
        return self.event.t


@dataclass(frozen=True, slots=True)
class EngineAppeared:
    """An engine seen for the first time (or again after it was forgotten)."""

    t: float
    engine: str
    labels: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class EngineVanished:
    """An engine whose series have been gone for `forget_after_s`: forgotten."""

    t: float
    engine: str


@dataclass(frozen=True, slots=True)
class QueryFailed:
    """A query cycle that failed: every engine is down at `t` (a scrape failure, not a crash)."""

    t: float
    error: str


FleetEvent = EngineEvent | EngineAppeared | EngineVanished | QueryFailed


class _Engine:
    __slots__ = ("labels", "last_t", "missing_since", "step")

    def __init__(self, step: MonitorStep, labels: Mapping[str, str]) -> None:
        self.step = step
        self.labels = labels
        self.last_t: float | None = None
        self.missing_since: float | None = None


class FleetBank:
    """Every watched engine's monitor state, keyed by engine (the group label's value)."""

    def __init__(
        self, config: MonitorConfig, *, gpu: bool = True, forget_after_s: float = FORGET_AFTER_S
    ) -> None:
        self._config = config
        self._gpu = gpu
        self._forget_after_s = forget_after_s
        self._engines: dict[str, _Engine] = {}

    @property
    def engines(self) -> Mapping[str, Mapping[str, str]]:
        """Each watched engine's labels."""
        return {key: e.labels for key, e in self._engines.items()}

    def step(self, engine: str) -> MonitorStep:
        """One engine's monitor step (its detector state, for displays)."""
        return self._engines[engine].step

    def _feed(self, key: str, engine: _Engine, reading: Reading) -> list[FleetEvent]:
        if engine.last_t is not None and reading.t <= engine.last_t:
            return []  # not scraped again since the last reading
        engine.last_t = reading.t
        engine.missing_since = None
        util = reading.gpu_util if engine.step.gpu_checked else {}
        events = engine.step.events(
            reading.t,
            reading.snapshot,
            util,
            error=reading.error,
            client_pending=reading.client_pending,
        )
        return [EngineEvent(key, e) for e in events]

    def _down(self, key: str, engine: _Engine, now: float, error: str) -> list[FleetEvent]:
        if engine.last_t is not None and now <= engine.last_t:
            return []
        engine.last_t = now
        return [EngineEvent(key, e) for e in engine.step.events(now, None, None, error=error)]

    def feed(
        self, key: str, reading: Reading, labels: Mapping[str, str] | None = None
    ) -> list[FleetEvent]:
        """Feed one engine's reading (a new engine appears with its first vLLM reading)."""
        engine = self._engines.get(key)
        out: list[FleetEvent] = []
        if engine is None:
            if reading.snapshot is None:
                return out  # never seen with vLLM series: another job's target, not an engine
            checked = self._gpu and reading.gpu_util is not None
            engine = _Engine(MonitorStep(self._config, checked), labels or {})
            self._engines[key] = engine
            out.append(EngineAppeared(reading.t, key, engine.labels))
        out.extend(self._feed(key, engine, reading))
        return out

    def observe(
        self,
        now: float,
        readings: Mapping[str, Reading],
        labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> list[FleetEvent]:
        """Feed one cycle's readings (engine -> its latest reading) read at `now`."""
        out: list[FleetEvent] = []
        for key, reading in readings.items():
            out.extend(self.feed(key, reading, (labels or {}).get(key)))
        for key in [k for k in self._engines if k not in readings]:
            out.extend(self._missing(key, now, "no series in Prometheus"))
        return out

    def _missing(self, key: str, now: float, error: str) -> list[FleetEvent]:
        engine = self._engines[key]
        if engine.missing_since is None:
            engine.missing_since = now
        if now - engine.missing_since >= self._forget_after_s:
            del self._engines[key]
            return [EngineVanished(now, key)]
        return self._down(key, engine, now, error)

    def failed(self, now: float, error: str) -> list[FleetEvent]:
        """A query cycle that failed at `now`: every engine is down (their scrapes failed)."""
        out: list[FleetEvent] = [QueryFailed(now, error)]
        for key, engine in self._engines.items():
            out.extend(self._down(key, engine, now, f"query failed: {error}"))
        return out
