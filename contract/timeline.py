"""The lines of `timeline.jsonl`: one JSON object per monitor event, told apart by `type`.

Written by the monitor as events happen (HTTP arms and virtual-clock arms alike) and replayed
by the reports. `t` is seconds since the monitor started, on the arm's clock (wall seconds
for an HTTP arm, engine seconds for a virtual-clock arm); reports convert with the arm's time
scale. Kinds: `sample` (one scrape), `gpu` (one GPU telemetry reading), `down` (the engine's
/metrics did not answer), `stall_started`, `stall_ended` and `stop_requested` (the detector).
Fields an engine does not export are null; lines from older runs may lack the newer fields.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from stallkit.contract.files import TIMELINE_FILE

__all__ = [
    "STALL_KINDS",
    "STALL_KIND_MEANING",
    "TIMELINE_FILE",
    "DownLine",
    "EngineView",
    "GpuLine",
    "SampleLine",
    "StallEndedLine",
    "StallEvidence",
    "StallKind",
    "StallStartedLine",
    "StopRequestedLine",
    "TimelineLine",
    "timeline_adapter",
]

#: What a stall looks like from the engine's metrics, in the order the detector checks the
#: signatures (the first that holds names the stall); `STALL_KIND_MEANING` says each one.
StallKind = Literal["dead_core", "thrashing", "blocked", "busy_hang", "spinning", "frozen"]
#: every kind, in the detector's order
STALL_KINDS: tuple[StallKind, ...] = get_args(StallKind)
#: what each kind means, for people (alerts, docs)
STALL_KIND_MEANING: dict[StallKind, str] = {
    "dead_core": "the server answers but the engine's series are gone (its core died behind "
    "a live API)",
    "thrashing": "requests are preempted and re-prefilled, no token comes out",
    "blocked": "the scheduler steps but nothing runs while requests wait (one that can never "
    "fit heads the queue)",
    "busy_hang": "the GPUs are busy but the scheduler does not step (a collective or kernel hang)",
    "spinning": "the scheduler steps and schedules nothing (a livelock)",
    "frozen": "nothing moves: the core takes no step (its gauges keep their last values, "
    "whatever they read)",
}

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class EngineView(BaseModel):
    """What one scrape saw of one engine (or summed over engines); null: not exported."""

    model_config = _FROZEN

    running: int | None = Field(None, description="Requests running.")
    waiting: int | None = Field(None, description="Requests waiting.")
    waiting_capacity: int | None = Field(None, description="Waiting for capacity.")
    waiting_deferred: int | None = Field(None, description="Waiting as deferred restores.")
    kv_usage: float | None = Field(None, description="KV cache usage, a fraction 0..1.")
    gen_tokens: float | None = Field(None, description="Generated tokens, counter total.")
    prompt_tokens: float | None = Field(None, description="Prompt tokens, counter total.")
    preemptions: float | None = Field(None, description="Preemptions, counter total.")
    prefix_queries: float | None = Field(None, description="Prefix cache queries (tokens).")
    prefix_hits: float | None = Field(None, description="Prefix cache hits (tokens).")
    iterations: float | None = Field(None, description="Engine steps (iteration histogram count).")
    compute_s: dict[str, float] | None = Field(
        None, description="Scheduler compute seconds by class (the fork's counter)."
    )

    @property
    def has_engine_series(self) -> bool:
        """Whether the page carried the engine's own series (a core that died behind a live
        server leaves a page without them: no load is observed there)."""
        return any(v is not None for v in (self.running, self.waiting, self.gen_tokens))


class _SampleHead(BaseModel):
    # a base of its own so that `type` and `t` come first in the line, as in every other kind
    model_config = _FROZEN
    type: Literal["sample"] = "sample"
    t: float = Field(description="Seconds since the monitor started, on the arm's clock.")


class SampleLine(EngineView, _SampleHead):
    """One scrape of /metrics: totals over engines, the generation rate, per-engine views."""

    gen_tok_s: float | None = Field(None, description="Generated tokens per second since the last.")
    engines: dict[str, EngineView] | None = Field(
        None,
        description="Each engine's own view, keyed by engine label; only when there are several.",
        exclude_if=lambda value: value is None,  # absent, not null, with one engine
    )


class GpuLine(BaseModel):
    """One GPU telemetry reading (a failed read is not written: a gap)."""

    model_config = _FROZEN
    type: Literal["gpu"] = "gpu"
    t: float = Field(description="Seconds since the monitor started, on the arm's clock.")
    util: dict[str, float] = Field(description="Utilisation in % by GPU index.")


class DownLine(BaseModel):
    """The engine's /metrics did not answer (not a stall)."""

    model_config = _FROZEN
    type: Literal["down"] = "down"
    t: float = Field(description="Seconds since the monitor started, on the arm's clock.")
    error: str = Field(description="Why the scrape failed.")


def _absent(value: object) -> bool:
    return value is None


class StallEvidence(BaseModel):
    """What a stall showed beyond its kind: that the engine's gauges hid it, the GPUs' power
    draw and SM activity where DCGM gives them. Absent fields were not seen."""

    model_config = _FROZEN
    client_waiting: int | None = Field(
        None,
        description="Requests the run's clients were waiting on while the engine's gauges "
        "read nothing running and nothing waiting (a stall its gauges hide); absent: the "
        "gauges showed the work.",
        exclude_if=_absent,
    )
    page_unanswered: bool | None = Field(
        None,
        description="The engine's metrics page stopped answering while work was pending: the "
        "run's clients waited on `client_waiting` requests, or its port accepted connections "
        "(`connections_accepted`) after a page that showed work (an engine answering neither: "
        "stalled, not down); absent: the page answered.",
        exclude_if=_absent,
    )
    connections_accepted: bool | None = Field(
        None,
        description="The engine's port accepted connections while its metrics page went "
        "unanswered (a process frozen whole, e.g. SIGSTOPped: the kernel's listen backlog "
        "takes them; a dead engine refuses them, which is down); absent: not seen.",
        exclude_if=_absent,
    )
    power_w: dict[str, float] | None = Field(
        None,
        description="Power draw in watts by GPU index, the latest reading.",
        exclude_if=_absent,
    )
    sm_active: dict[str, float] | None = Field(
        None,
        description="SM activity by GPU index, a fraction 0..1, the latest reading.",
        exclude_if=_absent,
    )

    def words(self) -> str:
        """For people: `engine reports idle, 3 requests waiting on clients; power 0:62 W`."""
        said: list[str] = []
        if self.page_unanswered:
            page = ["connections accepted"] if self.connections_accepted else []
            page.append("page unanswered" if page else "metrics page unanswered")
            if self.client_waiting:
                page.append(f"{self.client_waiting} requests waiting on clients")
            said.append(", ".join(page))
        elif self.client_waiting:
            said.append(f"engine reports idle, {self.client_waiting} requests waiting on clients")
        if self.power_w:
            said.append("power " + _per_gpu(self.power_w, "{:.0f} W"))
        if self.sm_active:
            said.append("SM active " + _per_gpu(self.sm_active, "{:.0%}"))
        return "; ".join(said)


def _per_gpu(values: dict[str, float], form: str) -> str:
    return " ".join(f"{gpu}:{form.format(v)}" for gpu, v in sorted(values.items()))


class StallStartedLine(BaseModel):
    """The detector judged a stall."""

    model_config = _FROZEN
    type: Literal["stall_started"] = "stall_started"
    t: float = Field(description="When it was judged, seconds since the monitor started.")
    onset: float = Field(description="When the stall condition began, same clock as `t`.")
    kind: StallKind = Field(description="What the stall looks like (see StallKind).")
    gpu_checked: bool = Field(False, description="GPU idleness was part of the rule.")
    evidence: StallEvidence | None = Field(
        None, description="What the stall showed beyond its kind.", exclude_if=_absent
    )


class StallEndedLine(BaseModel):
    """A stall ended (work moved again)."""

    model_config = _FROZEN
    type: Literal["stall_ended"] = "stall_ended"
    t: float = Field(description="Seconds since the monitor started, on the arm's clock.")
    onset: float = Field(description="The stall's onset, same clock as `t`.")
    kind: StallKind = Field(description="What the stall looked like (see StallKind).")
    duration_s: float = Field(description="From onset to end, seconds on the arm's clock.")


class StopRequestedLine(BaseModel):
    """The detector asked to stop the run after `stop_after` seconds of stall."""

    model_config = _FROZEN
    type: Literal["stop_requested"] = "stop_requested"
    t: float = Field(description="Seconds since the monitor started, on the arm's clock.")
    onset: float = Field(description="The stall's onset, same clock as `t`.")
    stall_s: float = Field(description="How long the stall had lasted, seconds on the arm's clock.")


TimelineLine = Annotated[
    SampleLine | GpuLine | DownLine | StallStartedLine | StallEndedLine | StopRequestedLine,
    Field(discriminator="type"),
]

#: validates one timeline line (any kind) from JSON or a dict
timeline_adapter: TypeAdapter[TimelineLine] = TypeAdapter(TimelineLine)
