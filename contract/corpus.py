"""`kit corpus run --json FILE`: what each replayed stall case showed, engine by engine.

A corpus case is a known stall (the fork's livelock, an upstream vLLM or LMCache report) with
the engine that stalls and the engine that does not. One `CaseOutcome` per case says how many
of its seeds each engine stalled in, the first stall's kind and onset, which seeds were cut
short, and whether the case reproduced: the buggy engine stalled in at least one seed with the
expected kind, and the fixed engine ran every seed to its end without a stall. Times are
engine seconds, except `wall_s`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.timeline import StallKind

__all__ = ["CORPUS_SCHEMA_VERSION", "CaseOutcome", "CaseStatus", "CorpusFile", "EngineOutcome"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

#: the file's layout version
CORPUS_SCHEMA_VERSION = 1

#: reproduced: as expected; not_reproduced: the buggy engine did not stall as expected, or the
#: fixed engine stalled or was cut short; skipped: the case needs what is not installed here;
#: interrupted: Ctrl-C stopped it (its figures are what ran)
CaseStatus = Literal["reproduced", "not_reproduced", "skipped", "interrupted"]


class EngineOutcome(BaseModel):
    """One engine of a case over its seeds."""

    model_config = _FROZEN
    spec: str = Field(description="The engine spec.")
    seeds: int = Field(description="Seeds run.")
    stalled: int = Field(description="Seeds with at least one stall.")
    kinds: list[StallKind] = Field(description="The first stall's kind, per stalled seed.")
    first_onset_s: float | None = Field(
        description="The earliest first-stall onset over the seeds, engine seconds."
    )
    median_onset_s: float | None = Field(
        description="The median first-stall onset over the stalled seeds, engine seconds."
    )
    censored: int = Field(description="Seeds that ended early without a stall.")


class CaseOutcome(BaseModel):
    """One case: its report, both engines, and whether it reproduced."""

    model_config = _FROZEN
    case: str = Field(description="The case's name.")
    report: str = Field(description="The upstream report it reproduces (e.g. vllm#45388).")
    fixed_by: str = Field(description="What fixed it (a PR, a release, a policy).")
    expect: StallKind = Field(description="The stall kind the buggy engine should show.")
    status: CaseStatus = Field(description="Whether the case reproduced.")
    reason: str = Field(description="Why not, or why skipped; empty when reproduced.")
    buggy: EngineOutcome | None = Field(description="The engine that stalls (None: skipped).")
    fixed: EngineOutcome | None = Field(description="The engine that does not (None: skipped).")
    wall_s: float = Field(description="Wall seconds the case took.")
    run_dir: str | None = Field(description="The A/B directory the case wrote (None: skipped).")


class CorpusFile(BaseModel):
    """The file `kit corpus run --json` writes."""

    model_config = _FROZEN
    schema_version: int = Field(CORPUS_SCHEMA_VERSION, description="This file's layout version.")
    cases: list[CaseOutcome] = Field(description="One outcome per case, in the order run.")
