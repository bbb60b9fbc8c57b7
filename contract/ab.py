"""`ab.json` (`run.json` for a one-arm run): the A/B figures per arm, per seed, and the verdict.

Written by the reports from the saved arm directories; other tools read it for the figures
without re-reading the run. Every time is in engine seconds: an HTTP arm's wall seconds are
converted with the time scale named in `scale_basis` (see `contract.time`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from contract.files import AB_FILE, RUN_FILE
from contract.meta import Clock
from contract.time import ScaleBasis

__all__ = [
    "AB_FILE",
    "RUN_FILE",
    "ABFile",
    "ArmFigures",
    "ArmReport",
    "BundleLink",
    "SeedRow",
    "Stall",
    "Verdict",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Stall(BaseModel):
    """One stall of an arm, in engine seconds from the start of monitoring."""

    model_config = _FROZEN
    start_s: float = Field(description="Onset of the zero-rate condition, engine seconds.")
    duration_s: float = Field(description="How long it lasted, engine seconds.")
    kind: str = Field(description="spinning (counters move) or frozen (nothing moves).")
    stopped_run: bool = Field(description="The monitor stopped the run during this stall.")


class BundleLink(BaseModel):
    """One stall's forensics bundle, for the report."""

    model_config = _FROZEN
    onset_s: float = Field(description="The stall's onset, engine seconds from monitor start.")
    kind: str = Field(description="The stall's kind.")
    path: str = Field(description="The bundle directory, relative to the arm directory.")
    top_frames: list[str] = Field(description="Innermost frames of the hottest stack.")
    hot_leaves: list[str] = Field(
        default_factory=list, description="Busiest functions, each with its share of samples."
    )
    scheduler: str | None = Field(
        None, description="The simulator's scheduler state in one line (simulator arms only)."
    )
    errors: int = Field(description="What could not be collected (see the manifest).")


class ArmFigures(BaseModel):
    """Every figure of the A/B table for one arm (times in engine seconds)."""

    model_config = _FROZEN
    spec: str = Field(description="The engine spec.")
    stalls: list[Stall] = Field(description="Stalls in onset order.")
    stopped_by_monitor: bool = Field(description="The monitor stopped the run during a stall.")
    turns: int = Field(description="Completed turns.")
    errors: int = Field(description="Requests failed with an HTTP, stream or connect error.")
    timeouts: int = Field(description="Requests aborted after the read timeout.")
    aborted: int = Field(description="Requests cut short by the end of the run.")
    max_kv_perc: float | None = Field(description="Highest KV cache usage seen, in %.")
    preemptions: float | None = Field(description="Preemptions during the run.")
    log_counts: dict[str, int] = Field(description="Engine log lines per named pattern.")
    decode_tok_s: float | None = Field(description="Generated tokens per engine second.")
    cached_perc: float | None = Field(description="Prompt tokens served from cache, in %.")
    duration_s: float = Field(description="Engine seconds the arm ran.")
    planned_duration_s: float | None = Field(description="Engine seconds it was planned to run.")
    end_reason: str = Field(description="Why the arm ended (meta.json's end_reason).")
    time_scale: float = Field(description="Engine seconds per wall second used to convert.")
    scale_basis: ScaleBasis = Field(
        "measured", description="Whether `time_scale` is the one the arm measured or nominal."
    )
    forensics: list[BundleLink] = Field(default_factory=list, description="Stall bundles.")
    seed: int | None = Field(None, description="The load's seed.")
    clock: Clock = Field("wall", description="virtual (engine clock, in process) or wall (HTTP).")
    like_for_like: bool = Field(True, description="False when the arm fell behind its clock.")
    lag: str | None = Field(None, description="Why the arm is not like for like, if it lagged.")


class SeedRow(BaseModel):
    """One seed of one arm, as the per-seed table and ab.json list it (engine seconds)."""

    model_config = _FROZEN
    seed: int | None = Field(description="The load's seed.")
    stalled: bool = Field(description="At least one stall.")
    kind: str | None = Field(description="Kind of the first stall (spinning, frozen).")
    onset_s: float | None = Field(description="Onset of the first stall, engine s from start.")
    stopped_run: bool = Field(description="The monitor stopped the run during a stall.")
    turns: int = Field(description="Completed turns.")
    preemptions: float | None = Field(description="Preemptions during the run.")
    restores_recomputed: int | None = Field(
        description="Restores recomputed after the max wait (from the engine log)."
    )
    decode_tok_s: float | None = Field(description="Generated tokens per engine second.")
    duration_s: float = Field(description="Engine seconds the arm ran.")
    clock: Clock = Field(description="virtual (engine clock) or wall (HTTP at a time scale).")
    like_for_like: bool = Field(description="False when the arm fell behind its clock.")


class Verdict(BaseModel):
    """How often each arm stalled, and the odds the difference is chance."""

    model_config = _FROZEN
    seeds: int = Field(description="Seeds per arm.")
    base_stalled: int = Field(description="Seeds in which the base arm stalled.")
    fix_stalled: int = Field(description="Seeds in which the fix arm stalled.")
    p_value: float = Field(
        description="One-sided Fisher exact test of 'fix stalls less often than base'."
    )


class ArmReport(ArmFigures):
    """One arm in ab.json: its figures (summed over seeds) and one row per seed."""

    seeds: list[SeedRow] = Field(default_factory=list, description="One row per seed.")


class ABFile(BaseModel):
    """ab.json (or run.json)."""

    model_config = _FROZEN
    kit: str = Field(description="The kit's name.")
    arms: dict[str, ArmReport] = Field(description="Each arm's figures, by arm name.")
    verdict: Verdict | None = Field(description="Base versus fix over the seeds (both arms only).")
