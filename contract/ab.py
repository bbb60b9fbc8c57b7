"""`ab.json` (`run.json` for a one-arm run): the A/B figures per arm, per seed, and the verdict.

Written by the reports from the saved arm directories; other tools read it for the figures
without re-reading the run. Every time is in engine seconds: an HTTP arm's wall seconds are
converted with the time scale named in `scale_basis` (see `stallkit.contract.time`).

Version 2 made the verdict exposure-aware: each seed carries its exposure (engine seconds of
observed load until its first stall or its end) and whether it was censored (ended early, or
its metrics were down at the end) with the reason; each arm its stall rate per engine hour
with an exact 95 % interval; the verdict names its test and the rate ratio.

Version 3 counts only time under load: exposure is engine seconds with work pending (requests
running or waiting on the engine, or in flight from the agents), rates such as decode tok/s
are over that time (`loaded_s`), seeds whose runs are identical count once (`same_as`, the
rate's `runs`, the verdict's `base_runs` and `fix_runs`), the per-seed `like_for_like` is the arm's (an early end is not like for
like), and seeds whose files could not be read are listed (`damaged`).

A run cut short (Ctrl-C) before every seed of every arm ran to its end says so (`partial`: the
seeds finished of those planned, from `plan.json`); its verdict is left out (null) unless the
report was asked for over the seeds recorded (`kit report --partial`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.files import AB_FILE, PLAN_FILE, RUN_FILE
from stallkit.contract.meta import Clock, EndReason, EngineCapabilities
from stallkit.contract.slo import NonInferiority, SloFigures, SloSummary
from stallkit.contract.time import ScaleBasis
from stallkit.contract.timeline import StallEvidence, StallKind

__all__ = [
    "AB_FILE",
    "AB_SCHEMA_VERSION",
    "PLAN_FILE",
    "RUN_FILE",
    "ABFile",
    "ArmFigures",
    "ArmReport",
    "BundleLink",
    "Censor",
    "Conclusion",
    "DamagedSeed",
    "PartialRun",
    "RunPlan",
    "SeedRow",
    "Stall",
    "StallRate",
    "Verdict",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

#: ab.json's layout version (2: exposure, censoring, rates and the Poisson rate test; 3: time
#: under load only, identical seeds counted once, damaged seeds listed)
AB_SCHEMA_VERSION = 3

#: why a seed's observation ended before its planned length without a stall: the arm's end
#: reason, or `metrics_down` when its engine's /metrics did not answer at the end
Censor = Literal["stall_stop", "interrupted", "error", "engine_died", "starting", "metrics_down"]

#: what the verdict concludes
Conclusion = Literal["fix_better", "not_significant", "fix_not_better", "inconclusive"]


class Stall(BaseModel):
    """One stall of an arm, in engine seconds from the start of monitoring."""

    model_config = _FROZEN
    start_s: float = Field(description="Onset of the zero-rate condition, engine seconds.")
    duration_s: float = Field(description="How long it lasted, engine seconds.")
    kind: StallKind = Field(description="What the stall looked like (see the timeline's kinds).")
    stopped_run: bool = Field(description="The monitor stopped the run during this stall.")
    evidence: StallEvidence | None = Field(
        None,
        description="What the stall showed beyond its kind (e.g. gauges that hid it).",
        exclude_if=lambda value: value is None,
    )


class BundleLink(BaseModel):
    """One stall's forensics bundle, for the report."""

    model_config = _FROZEN
    onset_s: float = Field(description="The stall's onset, engine seconds from monitor start.")
    kind: StallKind = Field(description="The stall's kind.")
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
    capabilities: EngineCapabilities = Field(
        default_factory=EngineCapabilities, description="What the arm's engine offers (meta.json)."
    )
    stalls: list[Stall] = Field(description="Stalls in onset order.")
    stopped_by_monitor: bool = Field(description="The monitor stopped the run during a stall.")
    turns: int = Field(description="Completed turns.")
    errors: int = Field(description="Requests failed with an HTTP, stream or connect error.")
    timeouts: int = Field(description="Requests aborted after the read timeout.")
    aborted: int = Field(description="Requests cut short by the end of the run.")
    max_kv_perc: float | None = Field(description="Highest KV cache usage seen, in %.")
    preemptions: float | None = Field(description="Preemptions during the run.")
    log_counts: dict[str, int] = Field(description="Engine log lines per named pattern.")
    decode_tok_s: float | None = Field(
        description="Generated tokens per engine second under load (see `loaded_s`)."
    )
    cached_perc: float | None = Field(description="Prompt tokens served from cache, in %.")
    duration_s: float = Field(description="Engine seconds the arm ran.")
    loaded_s: float | None = Field(
        None,
        description="Engine seconds of the run with work pending (requests running or waiting "
        "on the engine, or in flight from the agents), stalls included, idle time not.",
    )
    planned_duration_s: float | None = Field(description="Engine seconds it was planned to run.")
    end_reason: EndReason = Field(description="Why the arm ended (meta.json's end_reason).")
    time_scale: float = Field(description="Engine seconds per wall second used to convert.")
    scale_basis: ScaleBasis = Field(
        "measured", description="Whether `time_scale` is the one the arm measured or nominal."
    )
    forensics: list[BundleLink] = Field(default_factory=list, description="Stall bundles.")
    seed: int | None = Field(None, description="The load's seed.")
    clock: Clock = Field("wall", description="virtual (engine clock, in process) or wall (HTTP).")
    like_for_like: bool = Field(True, description="False when the arm fell behind its clock.")
    lag: str | None = Field(None, description="Why the arm is not like for like, if it lagged.")
    exposure_s: float = Field(
        0.0,
        description="Engine seconds with work pending and metrics up, until the first stall or "
        "the end (idle time is not exposure).",
    )
    censored: Censor | None = Field(
        None, description="Why the observation ended early without a stall (null: it did not)."
    )
    run_digest: str | None = Field(
        None,
        description="A digest of what the seed observed (timeline, requests' times and sizes): "
        "seeds with the same digest ran the same run.",
    )

    @property
    def comparable(self) -> bool:
        """Whether the arm's totals are like for like: it ran its planned length on its clock."""
        return self.end_reason == "duration" and self.like_for_like


class SeedRow(BaseModel):
    """One seed of one arm, as the per-seed table and ab.json list it (engine seconds)."""

    model_config = _FROZEN
    seed: int | None = Field(description="The load's seed.")
    stalled: bool = Field(description="At least one stall.")
    kind: StallKind | None = Field(description="Kind of the first stall.")
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
    like_for_like: bool = Field(
        description="False when the seed's totals are not like for like: it ended before its "
        "planned length, or fell behind its clock (the arm's table uses the same rule)."
    )
    end_reason: EndReason = Field(description="Why the seed's arm ended (meta.json's).")
    exposure_s: float = Field(
        description="Engine seconds with work pending and metrics up, until the first stall's "
        "onset or the end."
    )
    censored: Censor | None = Field(
        description="Why the seed ended early without a stall (null: stalled, or ran its length)."
    )
    same_as: int | None = Field(
        None,
        description="The earlier seed whose run this one repeats exactly (null: a distinct run); "
        "a repeat is not a new observation and counts once.",
    )
    run_digest: str | None = Field(
        None, description="A digest of what the seed observed (see ArmFigures.run_digest)."
    )
    slo: SloFigures | None = Field(
        None,
        description="The seed's SLO figures after the warm-up (only when the kit sets [slo]).",
        exclude_if=lambda value: value is None,
    )


class StallRate(BaseModel):
    """An arm's first stalls per engine hour of exposure, with an exact 95 % interval."""

    model_config = _FROZEN
    stalls: int = Field(
        description="Distinct runs that stalled (each counts its first stall; repeats once)."
    )
    exposure_s: float = Field(
        description="Engine seconds of exposure, summed over the distinct runs."
    )
    censored: int = Field(description="Distinct runs that ended early without a stall.")
    runs: int | None = Field(None, description="Distinct runs (seeds whose runs differ).")
    stall_rate_per_h: float | None = Field(
        description="Stalls per engine hour of exposure (null: no exposure)."
    )
    ci95: tuple[float, float] | None = Field(
        description="Exact (Garwood) 95 % interval of the rate per hour; with no stall, "
        "(0, one-sided 95 % upper bound)."
    )


class Verdict(BaseModel):
    """How often each arm stalled, and the odds the difference is chance."""

    model_config = _FROZEN
    seeds: int = Field(description="Seeds per arm.")
    base_runs: int | None = Field(None, description="Distinct runs of the base arm.")
    fix_runs: int | None = Field(None, description="Distinct runs of the fix arm.")
    base_stalled: int = Field(description="Distinct runs in which the base arm stalled.")
    fix_stalled: int = Field(description="Distinct runs in which the fix arm stalled.")
    p_value: float = Field(
        description="One-sided p-value of `test` for 'fix stalls less often than base'."
    )
    test: Literal["poisson_conditional"] = Field(
        "poisson_conditional",
        description="Exact conditional test of two Poisson rates: given both arms' stalls, the "
        "fix arm's count is binomial with its share of the exposure.",
    )
    rate_ratio: float | None = Field(
        description="Fix arm's stall rate over the base arm's (null: base never stalled)."
    )
    base_exposure_s: float = Field(description="Base arm's exposure, engine seconds.")
    fix_exposure_s: float = Field(description="Fix arm's exposure, engine seconds.")
    base_censored: int = Field(description="Base seeds censored (ended early, no stall).")
    fix_censored: int = Field(description="Fix seeds censored (ended early, no stall).")
    fisher_p: float | None = Field(
        description="One-sided Fisher exact test on stalled runs, k of N distinct runs; only "
        "when no run of either arm was censored (null otherwise)."
    )
    conclusion: Conclusion = Field(description="What the figures allow one to say.")
    reason: str = Field(description="The conclusion in words, with why.")
    noninferiority: list[NonInferiority] | None = Field(
        None,
        description="Per figure the kit names, whether the fix is not worse than the base by "
        "more than the kit's margin (only when the kit sets [slo]).",
        exclude_if=lambda value: value is None,
    )

    @property
    def regressions(self) -> list[NonInferiority]:
        """The figures on which the fix was shown worse than the base by more than the margin."""
        return [n for n in self.noninferiority or [] if n.answer == "no"]


class DamagedSeed(BaseModel):
    """A seed whose files could not be read: left out of the report, and named."""

    model_config = _FROZEN
    arm: str = Field(description="The arm's directory name.")
    seed: int | None = Field(description="The seed (from its directory's name).")
    file: str = Field(description="The file that could not be read, relative to the run.")
    problem: str = Field(description="What is wrong with it.")


class RunPlan(BaseModel):
    """plan.json: what `kit run` / `kit ab` set out to run, written before the first arm
    starts, so that a report of what was recorded can say what was not."""

    model_config = _FROZEN
    arms: dict[str, str] = Field(description="Each arm's engine spec, by arm name.")
    seeds: list[int] = Field(description="The seeds every arm was to run, in order.")


class PartialRun(BaseModel):
    """A run cut short (Ctrl-C) before every seed of every arm ran to its end."""

    model_config = _FROZEN
    seeds_planned: int = Field(description="Seeds the run was to run in every arm (plan.json).")
    seeds_finished: int = Field(
        description="Seeds that every arm ran to their own end (not interrupted)."
    )
    verdict_given: bool = Field(
        description="Whether the verdict was made over the seeds recorded (`kit report "
        "--partial`); false: it is left out, as fewer seeds finished than were asked for."
    )


class ArmReport(ArmFigures):
    """One arm in ab.json: its figures (summed over seeds) and one row per seed."""

    seeds: list[SeedRow] = Field(default_factory=list, description="One row per seed.")
    rate: StallRate | None = Field(None, description="Stalls per engine hour of exposure.")
    slo: SloSummary | None = Field(
        None,
        description="SLO figures over the seeds with 95 % intervals (only when the kit sets [slo]).",
        exclude_if=lambda value: value is None,
    )


class ABFile(BaseModel):
    """ab.json (or run.json)."""

    model_config = _FROZEN
    schema_version: int = Field(AB_SCHEMA_VERSION, description="This file's layout version.")
    kit: str = Field(description="The kit's name.")
    arms: dict[str, ArmReport] = Field(description="Each arm's figures, by arm name.")
    verdict: Verdict | None = Field(description="Base versus fix over the seeds (both arms only).")
    damaged: list[DamagedSeed] = Field(
        default_factory=list,
        description="Seeds left out because a file could not be read (`kit report --partial`).",
    )
    partial: PartialRun | None = Field(
        None,
        description="Set when the run was cut short before every seed finished (null: it was not).",
        exclude_if=lambda value: value is None,
    )
