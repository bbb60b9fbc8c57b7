"""An arm's `meta.json`: what ran, on which clock and scale, how it ended and how long it took.

Written twice by the orchestration (when the arm starts, with `end_reason` "starting", and
when it ends, whatever ends it), read by the reports. One builder (`ArmMeta.starting`) and one
way to change it (`ArmMeta.update`, which validates again), so both clocks write one shape.
Fields added after the first releases have defaults, so older run directories still read.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.files import META_FILE
from stallkit.contract.names import SCHEDULER_STEPS
from stallkit.contract.trace import TraceReplay

__all__ = [
    "END_WORDS",
    "META_FILE",
    "ArmMeta",
    "Clock",
    "EndReason",
    "EngineCapabilities",
    "EngineKind",
]

#: the engine spec's kind, as the engine's registry of spec forms names it (`sim`, `docker`,
#: `twin`, ...): text, since the contract cannot import that registry, and a list here would be
#: one more place to edit for each new kind (and a reader need not refuse a kind it does not know)
EngineKind = str
#: virtual: agents, engine and detector on the engine's clock in one process; wall: over HTTP
Clock = Literal["virtual", "wall"]
#: why the arm ended ("starting" while it runs or when it never got going)
EndReason = Literal["starting", "duration", "stall_stop", "interrupted", "error", "engine_died"]
#: each end reason in the words a user reads (the field's value is not for people)
END_WORDS: dict[EndReason, str] = {
    "starting": "ended without recording its end (interrupted or killed)",
    "duration": "ran its duration",
    "stall_stop": "stopped by the monitor during a stall",
    "interrupted": "interrupted",
    "error": "ended by an error",
    "engine_died": "ended when its engine died",
}


class EngineCapabilities(BaseModel):
    """What an arm's engine offers the run and its reports, recorded from its engine spec.

    Each engine spec case states its own (`stallkit.engine.spec`), completed with what the kit gives the
    arm (its GPUs, the scheduler its engine arguments load), so that a reader asks the field
    rather than guessing from the spec's text. The defaults are a generic engine's; a meta.json
    written before capabilities were recorded reads as those.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine_log: bool = Field(
        True, description="The run keeps the engine's log (a url: arm attaches and reads none)."
    )
    step_counter: bool = Field(
        False,
        description=f"The engine exports {SCHEDULER_STEPS} (the patched scheduler plugin).",
    )
    gpu: bool | None = Field(
        None, description="The engine runs on GPUs (None: not known, e.g. an attached engine)."
    )
    restore_admission: bool = Field(
        True,
        description="The scheduler has restore admission, so restore log rows count (the "
        "patched scheduler plugin has none: they read n/a).",
    )


class ArmMeta(BaseModel):
    """One arm's meta.json."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    arm: str = Field(description="The arm's name (base, fix, or the run's name).")
    spec: str = Field(description="The engine spec as given (sim:base, an image, url:...).")
    kind: EngineKind | None = Field(
        None, description="The engine spec's kind, as the engine names it (e.g. sim, twin)."
    )
    capabilities: EngineCapabilities = Field(
        default_factory=EngineCapabilities, description="What the arm's engine offers."
    )
    clock: Clock = Field("wall", description="The clock the arm ran on.")
    seed: int | None = Field(None, description="The load's seed.")
    time_scale: float = Field(
        1.0, description="Nominal engine seconds per wall second (1 for real engines)."
    )
    planned_duration_s: float | None = Field(
        None, description="The load's planned length, engine seconds (None: until stopped)."
    )
    started_at: str | None = Field(None, description="When the arm started, ISO 8601 UTC.")
    finished_at: str | None = Field(None, description="When the arm ended, ISO 8601 UTC.")
    end_reason: EndReason = Field(description="Why the arm ended.")
    stopped_by_monitor: bool = Field(False, description="The monitor stopped it during a stall.")
    wall_s: float = Field(
        0.0,
        description="Wall seconds the load ran (a virtual arm: the wall seconds it took to "
        "compute; older files held its engine seconds here, which engine_s also holds).",
    )
    engine_s: float | None = Field(
        None, description="Engine seconds the load ran (None: the engine's clock was not read)."
    )
    engine_s_per_wall_s: float | None = Field(
        None, description="The time scale the arm measured (wall-clock simulator arms only)."
    )
    compute_wall_s: float | None = Field(
        None, description="Wall seconds a virtual-clock arm took to compute."
    )
    error: str | None = Field(None, description="The first line of what ended it, if an error.")
    prefix_cache: str | None = Field(
        None,
        description="An engine kept across seeds (`url:`): `reset` when its prefix cache was "
        "dropped before the seed, else why not; null: the engine started with the seed, its "
        "cache empty.",
        exclude_if=lambda value: value is None,
    )
    trace: TraceReplay | None = Field(
        None,
        description="What of a trace the load replayed (file digest, sessions, requests, span, "
        "window, text salt); None: the synthetic workload.",
    )

    @classmethod
    def starting(
        cls,
        *,
        arm: str,
        spec: str,
        kind: EngineKind,
        clock: Clock,
        capabilities: EngineCapabilities | None = None,
        seed: int | None,
        time_scale: float,
        planned_duration_s: float | None,
        started_at: str,
        trace: TraceReplay | None = None,
    ) -> ArmMeta:
        """The meta of an arm that is starting (both clocks build it here)."""
        return cls(
            arm=arm,
            spec=spec,
            kind=kind,
            capabilities=capabilities or EngineCapabilities(),
            clock=clock,
            seed=seed,
            time_scale=time_scale,
            planned_duration_s=planned_duration_s,
            started_at=started_at,
            end_reason="starting",
            engine_s=0.0 if clock == "virtual" else None,
            trace=trace,
        )

    def update(self, **changes: Any) -> ArmMeta:
        """A copy with `changes` applied, validated again."""
        return type(self).model_validate(self.model_dump() | changes)
