"""Replay corpus cases: each case's kit as an A/B on the virtual clock, buggy engine against fixed.

A case runs as `kit ab --kit KIT --base BUGGY --fix FIXED --seeds N` would (the same plan,
workers and reports, its directory kept under the corpus run's), and its outcome is read back
from the A/B figures: how many seeds each engine stalled in, the first stall's kind and onset,
and which seeds were cut short. A case reproduces when the buggy engine stalled in at least
one seed, each with the expected kind, and the fixed engine ran every seed to its end clean; a
case with no fixed engine yet (no fix upstream) runs the buggy engine alone and reproduces on
its stalls.
"""

from __future__ import annotations

import io
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from stallkit.contract.ab import SeedRow
from stallkit.contract.corpus import CaseOutcome, EngineOutcome
from stallkit.kits.ab.execute import Plan, execute
from stallkit.kits.corpus.case import Case, missing, unbuilt_releases
from stallkit.kits.errors import KitError

if TYPE_CHECKING:
    from stallkit.reports import ABReport

__all__ = ["outcome_of", "plan_case", "run_cases", "skipped", "why_not_here"]


def plan_case(case: Case, out_dir: Path) -> Plan:
    """The A/B plan of `case` (raises KitError as `kit ab` would, before anything runs)."""
    return Plan.build(
        case.kit_ref(),
        {arm: engine.spec for arm, engine in zip(("base", "fix"), case.engines(), strict=False)},
        out_dir,
        dict(case.overrides),
        case.overlays(),
        seeds=case.seeds_text(),
        clock="virtual",
    )


def _engine(spec: str, rows: Sequence[SeedRow]) -> EngineOutcome:
    onsets = sorted(row.onset_s for row in rows if row.stalled and row.onset_s is not None)
    return EngineOutcome(
        spec=spec,
        seeds=len(rows),
        stalled=sum(row.stalled for row in rows),
        kinds=[row.kind for row in rows if row.stalled and row.kind is not None],
        first_onset_s=onsets[0] if onsets else None,
        median_onset_s=statistics.median(onsets) if onsets else None,
        censored=sum(not row.stalled and row.censored is not None for row in rows),
    )


def _verdict(case: Case, buggy: EngineOutcome, fixed: EngineOutcome | None) -> str:
    """Why the case did not reproduce; empty when it did (with no fixed engine, the buggy
    engine's stalls alone decide)."""
    problems = []
    ran = [buggy.seeds] if fixed is None else [buggy.seeds, fixed.seeds]
    if min(ran) < case.seed_count():
        problems.append("not every seed ran")
    if buggy.stalled == 0:
        problems.append("the buggy engine did not stall")
    wrong = sorted({kind for kind in buggy.kinds if kind != case.expect})
    if wrong:
        problems.append(f"the buggy engine stalled as {', '.join(wrong)}, not {case.expect}")
    if fixed is None:
        return "; ".join(problems)
    if fixed.stalled:
        problems.append(f"the fixed engine stalled in {fixed.stalled} of {fixed.seeds} seeds")
    if fixed.censored:
        problems.append(f"the fixed engine was cut short in {fixed.censored} seeds")
    return "; ".join(problems)


def outcome_of(
    case: Case, report: ABReport, run_dir: Path, wall_s: float, interrupted: bool
) -> CaseOutcome:
    """The outcome of `case` from its A/B figures."""
    buggy = _engine(case.buggy.spec, report.seeds.get("base", []))
    fixed = None if case.fixed is None else _engine(case.fixed.spec, report.seeds.get("fix", []))
    reason = "interrupted" if interrupted else _verdict(case, buggy, fixed)
    return CaseOutcome(
        case=case.name,
        report=case.report,
        fixed_by=case.fixed_by,
        expect=case.expect,
        status="interrupted" if interrupted else "not_reproduced" if reason else "reproduced",
        reason=reason,
        buggy=buggy,
        fixed=fixed,
        wall_s=round(wall_s, 1),
        run_dir=str(run_dir),
        has_fix=case.fixed is not None,
    )


def skipped(case: Case, reason: str) -> CaseOutcome:
    """The outcome of a case that could not run here."""
    return CaseOutcome(
        case=case.name,
        report=case.report,
        fixed_by=case.fixed_by,
        expect=case.expect,
        status="skipped",
        reason=reason,
        buggy=None,
        fixed=None,
        wall_s=0.0,
        run_dir=None,
        has_fix=case.fixed is not None,
    )


def why_not_here(case: Case, built_only: bool) -> str:
    """Why `case` cannot run here (vLLM or an extra missing, or with `built_only` a release's
    environment not built yet); empty when it can."""
    lacking = missing(case)
    if lacking:
        what, how = lacking[0]
        return f"needs {what}: {how}"
    unbuilt = unbuilt_releases(case) if built_only else []
    if unbuilt:
        return (
            f"needs vLLM {' and '.join(unbuilt)} (kit engine release build "
            f"{' '.join(unbuilt)}, or run without --built-only to build it)"
        )
    return ""


def run_cases(
    cases: Sequence[Case],
    out_dir: Path,
    on_start: Callable[[Case], None],
    on_outcome: Callable[[CaseOutcome], None],
    built_only: bool = False,
) -> bool:
    """Run `cases` one after another into `out_dir/CASE`; False when interrupted (Ctrl-C).

    A case that needs vLLM or an extra not installed here is skipped, named, with how to
    install it; with `built_only`, so is one whose vLLM release has no environment here yet
    (else the first run builds it). Every plan is built first, so a case that cannot start
    stops the run, naming the case, before anything runs.
    """
    plans: list[tuple[Case, Plan | str]] = []
    for case in cases:
        reason = why_not_here(case, built_only)
        try:
            plans.append((case, reason or plan_case(case, out_dir / case.name)))
        except KitError as exc:
            raise KitError(f"case {case.name}: {exc.message}", exc.hint) from None
    for case, plan in plans:
        if isinstance(plan, str):
            on_outcome(skipped(case, plan))
            continue
        on_start(case)
        started = time.monotonic()
        quiet = Console(file=io.StringIO(), width=120)
        result = execute(plan, dashboard=False, console=quiet)
        wall_s = time.monotonic() - started
        if result.report is not None:
            on_outcome(outcome_of(case, result.report, plan.out_dir, wall_s, result.interrupted))
        else:  # nothing recorded (stopped at once, or no arm started): named, never dropped
            status = "interrupted" if result.interrupted else "not_reproduced"
            on_outcome(
                skipped(case, "no arm recorded anything").model_copy(
                    update={"status": status, "wall_s": round(wall_s, 1)}
                )
            )
        if result.interrupted:
            return False
    return True
