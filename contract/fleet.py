"""The files of a fleet's run directory: `fleet.jsonl` (a watch) and a backtest's report.

`kit monitor --prometheus` writes `fleet.jsonl`: a first `fleet_started` line (when, which
server, which engines), then one line per engine appearing or vanishing, per failed query
cycle, and each engine's own monitor lines (stall started/ended, stop requested, down, in
the timeline's shapes, so new stall kinds flow through) tagged with the engine. Times `t`
are seconds since the watch started; `t0_unix` turns them into Unix time.

`kit rules --backtest` writes `alerts.jsonl`: when each generated alert would have been
pending and firing over the same range, evaluated by Prometheus itself.

`kit backtest` writes `stalls.jsonl` (one line per stall of any engine, with what the engine
showed at its onset), `backtest.json` (per-engine and fleet-wide exposure, stall counts and
rates per engine-hour) and `backtest.html`. Its times are Unix seconds (or, from a timeline
file without a start time, seconds since the timeline began).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from stallkit.contract.timeline import StallKind, TimelineLine

__all__ = [
    "ALERTS_FILE",
    "BACKTEST_FILE",
    "BACKTEST_HTML",
    "FLEET_FILE",
    "STALLS_FILE",
    "AlertFiring",
    "BacktestEngine",
    "BacktestFile",
    "BacktestStall",
    "EngineAppearedLine",
    "EngineLine",
    "EngineVanishedLine",
    "FleetLine",
    "FleetStartedLine",
    "QueryFailedLine",
    "fleet_adapter",
]

FLEET_FILE = "fleet.jsonl"
STALLS_FILE = "stalls.jsonl"
BACKTEST_FILE = "backtest.json"
BACKTEST_HTML = "backtest.html"
ALERTS_FILE = "alerts.jsonl"

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class FleetStartedLine(BaseModel):
    """The first line: what is watched, and the Unix time of `t` = 0."""

    model_config = _FROZEN
    type: Literal["fleet_started"] = "fleet_started"
    t0_unix: float = Field(description="Unix time of t = 0.")
    source: str = Field(description="The Prometheus base URL queried.")
    selector: str = Field(description="The PromQL label matchers that pick the engines.")
    group_by: str = Field(description="The label whose value names one engine.")
    interval_s: float = Field(description="Seconds between two query cycles.")


class EngineAppearedLine(BaseModel):
    """An engine seen for the first time (or again after it was forgotten)."""

    model_config = _FROZEN
    type: Literal["appeared"] = "appeared"
    t: float = Field(description="Seconds since the watch started.")
    engine: str = Field(description="The engine: its group label's value.")
    labels: dict[str, str] = Field(description="The labels all its series share.")


class EngineVanishedLine(BaseModel):
    """An engine whose series were gone long enough to forget it."""

    model_config = _FROZEN
    type: Literal["vanished"] = "vanished"
    t: float = Field(description="Seconds since the watch started.")
    engine: str = Field(description="The engine: its group label's value.")


class QueryFailedLine(BaseModel):
    """A query cycle that failed: every engine counts as down at `t` (not a stall)."""

    model_config = _FROZEN
    type: Literal["query_failed"] = "query_failed"
    t: float = Field(description="Seconds since the watch started.")
    error: str = Field(description="Why the query failed.")


class EngineLine(BaseModel):
    """One engine's monitor line (a stall start or end, a stop request, a down)."""

    model_config = _FROZEN
    type: Literal["engine"] = "engine"
    engine: str = Field(description="The engine: its group label's value.")
    line: TimelineLine = Field(description="The line, as an engine's timeline.jsonl has it.")


FleetLine = Annotated[
    FleetStartedLine | EngineAppearedLine | EngineVanishedLine | QueryFailedLine | EngineLine,
    Field(discriminator="type"),
]

#: validates one line of fleet.jsonl
fleet_adapter: TypeAdapter[FleetLine] = TypeAdapter(FleetLine)


class BacktestStall(BaseModel):
    """One stall the detector finds in an engine's history."""

    model_config = _FROZEN
    engine: str = Field(description="The engine: its group label's value.")
    kind: StallKind = Field(description="The stall's kind, as the detector names it.")
    onset: float = Field(description="When the stall condition began (the last progress).")
    judged: float = Field(description="When the rule had held for stall_after (the alert).")
    end: float | None = Field(description="When it ended; null: still stalled at the range's end.")
    duration_s: float = Field(description="From onset to end (or to the range's end).")
    running: int | None = Field(description="Requests running at the onset.")
    waiting: int | None = Field(description="Requests waiting at the onset.")
    kv_usage: float | None = Field(description="KV cache usage (0..1) at the onset.")
    gpu_util_max: float | None = Field(
        description="The busiest GPU's utilisation (%) at the onset; null: no GPU series."
    )


class BacktestEngine(BaseModel):
    """One engine over the range: how long it was observed and how often it stalled."""

    model_config = _FROZEN
    engine: str = Field(description="The engine: its group label's value.")
    labels: dict[str, str] = Field(description="The labels all its series share.")
    samples: int = Field(description="Scrapes read (each one once).")
    downs: int = Field(description="Points at which its target was down or missing.")
    exposure_s: float = Field(description="Seconds between consecutive successful scrapes.")
    stalls: int = Field(description="Stalls started.")
    stalled_s: float = Field(description="Seconds in stall (onset to end).")
    stalls_per_engine_hour: float | None = Field(
        description="Stalls per hour of exposure; null without exposure."
    )


class BacktestFile(BaseModel):
    """backtest.json: what was replayed, each engine's tally and the fleet's."""

    model_config = _FROZEN
    source: str = Field(description="The Prometheus base URL, or the file replayed.")
    selector: str = Field(description="The label matchers that picked the engines.")
    group_by: str = Field(description="The label whose value names one engine.")
    start: float = Field(description="Start of the range (Unix seconds, or timeline seconds).")
    end: float = Field(description="End of the range, same clock as start.")
    step_s: float | None = Field(description="The range queries' step; null: every sample.")
    stall_after_s: float = Field(description="The rule's stall_after, seconds.")
    engines: list[BacktestEngine] = Field(description="Each engine, most stalls first.")
    stalls: int = Field(description="Stalls of the whole fleet.")
    stalls_by_kind: dict[str, int] = Field(description="Stalls of the fleet by kind.")
    engine_hours: float = Field(description="Hours of exposure summed over engines.")
    stalls_per_engine_hour: float | None = Field(
        description="The fleet's stalls per engine-hour; null without exposure."
    )
    wall_s: float = Field(description="Wall seconds the replay took.")


class AlertFiring(BaseModel):
    """One alert of the generated rules over a backtest's range: pending, firing, resolved."""

    model_config = _FROZEN
    alert: str = Field(description="The alert's name (EngineStalled, EngineMetricsDown, ...).")
    engine: str = Field(description="The engine: its group label's value ('' if unlabelled).")
    labels: dict[str, str] = Field(
        description="The alert's labels (its expression's, and the rule's)."
    )
    active: float = Field(description="First evaluation at which its expression held (pending).")
    fired: float | None = Field(
        description="When it would have fired (held for its `for:`); null: never."
    )
    resolved: float | None = Field(
        description="First evaluation it no longer held; null: held to the end."
    )
