"""Whether a run directory holds every seed its plan asked for, and what to say when it does not.

A run cut short (Ctrl-C, or a killed process) leaves some seeds interrupted or never started.
Its figures are still worth reading, but a verdict (a p-value, a yes or no) made over fewer
seeds than were asked for reads as the result of the run that was asked for, so the report
leaves it out and says `interrupted: partial, N of M seeds` in its place, unless the verdict is
asked for over the seeds recorded (`kit report --partial`). The seeds planned come from
`plan.json` (a directory written before it existed: the seeds its arms recorded); a seed is
finished when every arm ran it to an end of its own (its duration, a stall stop, an error),
not interrupted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

from stallkit.contract.ab import PLAN_FILE, DamagedSeed, PartialRun, RunPlan, SeedRow
from stallkit.contract.errors import StallkitError
from stallkit.contract.jsonl import read_json
from stallkit.contract.meta import EndReason

__all__ = ["partial_note", "partial_run", "partial_words"]

#: the ends of a seed that did not run to an end of its own
_CUT: frozenset[EndReason] = frozenset({"interrupted", "starting"})


def _plan(run_dir: Path) -> RunPlan | None:
    with contextlib.suppress(StallkitError, OSError):
        return read_json(run_dir / PLAN_FILE, RunPlan)
    return None


def partial_run(
    run_dir: Path,
    seeds: dict[str, list[SeedRow]],
    damaged: Sequence[DamagedSeed],
    verdict_given: bool,
) -> PartialRun | None:
    """The run's partial state when it was cut short (None: every planned seed of every arm
    was recorded and none was interrupted). `verdict_given`: whether the report makes the
    verdict over the seeds recorded all the same."""
    plan = _plan(run_dir)
    arms = list(plan.arms) if plan is not None else list(seeds)
    recorded = sorted({r.seed for rows in seeds.values() for r in rows if r.seed is not None})
    planned = plan.seeds if plan is not None else recorded

    def seed_of(row: SeedRow) -> int | None:  # a one-seed arm's meta may not name its seed
        return planned[0] if row.seed is None and len(planned) == 1 else row.seed

    there = {(arm, seed_of(r)) for arm, rows in seeds.items() for r in rows}
    there |= {(d.arm, d.seed) for d in damaged}
    missing = any((arm, seed) not in there for arm in arms for seed in planned)
    cut = any(r.end_reason in _CUT for rows in seeds.values() for r in rows)
    if not (missing or cut):
        return None
    ended = {
        arm: {seed_of(r) for r in rows if r.end_reason not in _CUT} for arm, rows in seeds.items()
    }
    finished = [s for s in planned if all(s in ended.get(arm, set()) for arm in arms)]
    return PartialRun(
        seeds_planned=len(planned), seeds_finished=len(finished), verdict_given=verdict_given
    )


def partial_words(partial: PartialRun) -> str:
    """`interrupted: partial, 3 of 10 seeds` (the seeds every arm finished, of those planned)."""
    planned = partial.seeds_planned
    return f"interrupted: partial, {partial.seeds_finished} of {planned} seed{'s' * (planned != 1)}"


def partial_note(partial: PartialRun) -> str:
    """The footnote of a partial run's report: what its figures and its verdict cover."""
    head = (
        f"Interrupted: {partial.seeds_finished} of {partial.seeds_planned} planned seeds ran "
        "to their end in every arm; the figures cover the seeds recorded (an interrupted one "
        "is censored)"
    )
    if partial.verdict_given:
        return head + ", and so does the verdict (`kit report --partial`)."
    return (
        head + ". No verdict is given over fewer seeds than were asked for: `kit report "
        "--partial` on this directory makes it over the seeds recorded."
    )
