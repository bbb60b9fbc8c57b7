"""A corpus case's TOML file, and what `kit corpus run --json FILE` says each case showed.

`CaseFile` is the keys a case's TOML file holds (published as `case.schema.json`); the
corpus's own loader (`stallkit.kits.corpus.case`) reads it and resolves its kit and overlays.
A corpus case is a known stall (the fork's livelock, an upstream vLLM or LMCache report) with
the engine that stalls and the engine that does not. One `CaseOutcome` per case says how many
of its seeds each engine stalled in, the first stall's kind and onset, which seeds were cut
short, and whether the case reproduced: the buggy engine stalled in at least one seed with the
expected kind, and the fixed engine ran every seed to its end without a stall. Times are
engine seconds, except `wall_s`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.timeline import StallKind

__all__ = [
    "CASE_FILE",
    "CORPUS_SCHEMA_VERSION",
    "CaseEngine",
    "CaseFile",
    "CaseOutcome",
    "CaseStatus",
    "CorpusFile",
    "EngineOutcome",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

#: the file's layout version
CORPUS_SCHEMA_VERSION = 1

#: the name a case's file is published under (`kit schema`: case.schema.json); a case file
#: itself is named for its case (`my-case.toml`)
CASE_FILE = "case.toml"


class CaseEngine(BaseModel):
    """One engine of a case: a `[buggy]` or `[fixed]` table."""

    model_config = _FROZEN
    spec: str = Field(
        description="The engine spec, as `kit ab --base/--fix` takes it (e.g. twin:stock, "
        "twin@0.22.1:stock, twin:patched:base, sim:fix)."
    )
    overlay: str = Field(
        "",
        description="A twin source overlay: a folder, relative to the case file's folder, or "
        "the name of one under the corpus's overlays/ (empty: none).",
    )


class CaseFile(BaseModel):
    """A corpus case's TOML file: a known stall, the kit that provokes it, the engine that
    stalls and (where one exists) the engine that does not."""

    model_config = _FROZEN
    name: str = Field("", description="The case's name (empty: its file's stem).")
    title: str = Field(description="What stalls, in one line.")
    report: str = Field(
        description="The report it reproduces: repo#number (vllm#45388), or fork or stallkit."
    )
    report_url: str = Field("", description="Where the report is (empty: nowhere public).")
    fixed_by: str = Field(
        "", description="What fixed it: a PR, a release, a policy (empty: not fixed yet)."
    )
    kit: str = Field(
        description="The kit: a TOML file relative to the case file's folder (my-kit.toml), "
        "else a kit in the corpus's kits/ or a shipped kit, by name. A trace the kit names is "
        "found beside the kit."
    )
    expect: StallKind = Field(description="The stall kind the buggy engine shows.")
    seeds: Annotated[int, Field(ge=1, le=100)] | Annotated[list[int], Field(min_length=1)] = Field(
        3,
        description="Seeds each engine runs: a count (from the kit's load.seed on), or a list.",
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Kit settings the case changes, by dotted key (e.g. load.duration_s = 540).",
    )
    why: str = Field(description="What went wrong and what fixed it, in two sentences.")
    requires: list[str] = Field(
        default_factory=list, description="Extras the case needs installed (e.g. lmcache)."
    )
    buggy: CaseEngine = Field(description="The engine that stalls (the A/B's base arm).")
    fixed: CaseEngine | None = Field(
        None,
        description="The engine that does not stall (the A/B's fix arm). Optional: without "
        "one the case reproduces when the buggy engine stalls in at least one seed, and the "
        "table says no fix.",
    )


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
    fixed: EngineOutcome | None = Field(
        description="The engine that does not (None: skipped, or the case has no fixed engine)."
    )
    wall_s: float = Field(description="Wall seconds the case took.")
    run_dir: str | None = Field(description="The A/B directory the case wrote (None: skipped).")
    has_fix: bool = Field(
        True, description="Whether the case has a fixed engine (False: no fix exists yet)."
    )


class CorpusFile(BaseModel):
    """The file `kit corpus run --json` writes."""

    model_config = _FROZEN
    schema_version: int = Field(CORPUS_SCHEMA_VERSION, description="This file's layout version.")
    cases: list[CaseOutcome] = Field(description="One outcome per case, in the order run.")
