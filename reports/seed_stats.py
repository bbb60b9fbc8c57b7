"""Statistics over seeds: per-seed rows, stall rates with exact intervals, and the A/B verdict.

Pure functions over figures already read from saved arm directories. Each seed contributes
its first stall (or none) and its exposure, the engine seconds it was observed under load
until then (`stallkit.reports.exposure`); a seed that ended early is censored, never clean. Seeds whose
runs are identical (a kit whose workload does not depend on the seed, on the virtual clock)
are one observation: a repeat is marked (`same_as`) and counts once everywhere. Per arm
the stall rate is stalls per engine hour of exposure, with the exact (Garwood) 95 % interval
from the chi-squared distribution. The verdict is the exact conditional test of two Poisson
rates: given the stalls of both arms, the fix arm's count is binomial with the fix arm's share
of the exposure, tested one-sided ("the fix stalls less often"). When no seed of either arm
was censored, Fisher's exact test of stalled seeds (k of N) is given beside it. The numbers
come from `scipy.stats`; the tests check them against it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TypeVar

from stallkit.contract.ab import ArmFigures, Conclusion, SeedRow, StallRate, Verdict

__all__ = [
    "SeedRow",
    "StallRate",
    "Verdict",
    "distinct",
    "fisher_less",
    "garwood_per_h",
    "kaplan_meier",
    "mark_repeats",
    "onset_spread",
    "rate_of",
    "rate_test_less",
    "seed_row",
    "verdict",
]

#: the level of every test and interval
ALPHA = 0.05
_HOUR_S = 3600.0


def seed_row(arm: ArmFigures) -> SeedRow:
    """The per-seed row of one arm directory's figures."""
    first = arm.stalls[0] if arm.stalls else None
    return SeedRow(
        seed=arm.seed,
        stalled=first is not None,
        kind=None if first is None else first.kind,
        onset_s=None if first is None else first.start_s,
        stopped_run=arm.stopped_by_monitor,
        turns=arm.turns,
        preemptions=arm.preemptions,
        restores_recomputed=arm.log_counts.get("restores_recomputed"),
        decode_tok_s=arm.decode_tok_s,
        duration_s=arm.duration_s,
        clock=arm.clock,
        like_for_like=arm.comparable,
        end_reason=arm.end_reason,
        exposure_s=arm.exposure_s,
        censored=arm.censored,
        run_digest=arm.run_digest,
    )


R = TypeVar("R", bound=SeedRow)


def mark_repeats(rows: Sequence[R]) -> list[R]:
    """The rows, each seed whose run repeats an earlier seed's exactly naming that seed."""
    first: dict[str, R] = {}
    out = []
    for row in rows:
        digest = row.run_digest
        if digest is not None and digest in first and first[digest].seed is not None:
            row = row.model_copy(update={"same_as": first[digest].seed})
        elif digest is not None:
            first.setdefault(digest, row)
        out.append(row)
    return out


def distinct(rows: Sequence[R]) -> list[R]:
    """The rows that are observations of their own (repeats left out)."""
    return [r for r in rows if r.same_as is None]


def fisher_less(base_hits: int, base_n: int, fix_hits: int, fix_n: int) -> float:
    """One-sided Fisher exact: P(fix shows <= `fix_hits` stalled seeds) under equal odds."""
    from scipy.stats import fisher_exact

    if not (0 <= base_hits <= base_n and 0 <= fix_hits <= fix_n):
        raise ValueError("stalled seeds must lie between 0 and the seeds run")
    table = [[fix_hits, fix_n - fix_hits], [base_hits, base_n - base_hits]]
    return float(fisher_exact(table, alternative="less").pvalue)


def garwood_per_h(stalls: int, exposure_s: float) -> tuple[float, float]:
    """The exact 95 % interval of a Poisson rate, per hour of `exposure_s`.

    With no stall the lower bound is 0 and the upper one is one-sided (`-ln 0.05`, about 3.0
    stalls over the exposure): "at most this often, 95 %".
    """
    from scipy.stats import chi2

    hours = exposure_s / _HOUR_S
    if stalls == 0:
        return 0.0, float(chi2.ppf(1 - ALPHA, 2)) / 2 / hours
    low = float(chi2.ppf(ALPHA / 2, 2 * stalls)) / 2
    high = float(chi2.ppf(1 - ALPHA / 2, 2 * stalls + 2)) / 2
    return low / hours, high / hours


def rate_of(rows: Sequence[SeedRow]) -> StallRate:
    """An arm's stalls, exposure and stall rate per engine hour over its distinct runs."""
    rows = distinct(rows)
    stalls = sum(r.stalled for r in rows)
    exposure = round(sum(r.exposure_s for r in rows), 3)
    censored = sum(r.censored is not None for r in rows)
    if exposure <= 0:
        return StallRate(
            stalls=stalls,
            exposure_s=0.0,
            censored=censored,
            runs=len(rows),
            stall_rate_per_h=None,
            ci95=None,
        )
    return StallRate(
        stalls=stalls,
        exposure_s=exposure,
        censored=censored,
        runs=len(rows),
        stall_rate_per_h=stalls / (exposure / _HOUR_S),
        ci95=garwood_per_h(stalls, exposure),
    )


def rate_test_less(base_stalls: int, base_s: float, fix_stalls: int, fix_s: float) -> float:
    """One-sided exact conditional test of "the fix arm's Poisson rate is the lower one".

    Under equal rates, given `base_stalls + fix_stalls`, the fix arm's count is binomial with
    the fix arm's share of the exposure; the p-value is P(fix count <= `fix_stalls`).
    """
    from scipy.stats import binomtest

    total = base_stalls + fix_stalls
    if total == 0 or base_s <= 0 or fix_s <= 0:
        return 1.0
    share = fix_s / (base_s + fix_s)
    return float(binomtest(fix_stalls, total, share, alternative="less").pvalue)


def verdict(base: Sequence[SeedRow], fix: Sequence[SeedRow]) -> Verdict:
    """The verdict of a base and a fix arm over their seeds."""
    b, f = rate_of(base), rate_of(fix)
    p = rate_test_less(b.stalls, b.exposure_s, f.stalls, f.exposure_s)
    uncensored = b.censored == 0 and f.censored == 0
    base_n, fix_n = len(distinct(base)), len(distinct(fix))
    fisher = fisher_less(b.stalls, base_n, f.stalls, fix_n) if uncensored else None
    ratio = None
    if b.stall_rate_per_h and f.stall_rate_per_h is not None:
        ratio = f.stall_rate_per_h / b.stall_rate_per_h
    conclusion, reason = _conclude(b, f, p)
    return Verdict(
        seeds=max(len(base), len(fix)),
        base_runs=base_n,
        fix_runs=fix_n,
        base_stalled=b.stalls,
        fix_stalled=f.stalls,
        p_value=p,
        rate_ratio=ratio,
        base_exposure_s=b.exposure_s,
        fix_exposure_s=f.exposure_s,
        base_censored=b.censored,
        fix_censored=f.censored,
        fisher_p=fisher,
        conclusion=conclusion,
        reason=reason,
    )


def _conclude(b: StallRate, f: StallRate, p: float) -> tuple[Conclusion, str]:
    if b.stalls == 0:
        return "inconclusive", "inconclusive: base never stalled, nothing for the fix to show"
    if f.exposure_s <= 0 or f.ci95 is None or b.stall_rate_per_h is None:
        return "inconclusive", "inconclusive: the fix arm was never observed under load"
    if f.stall_rate_per_h is not None and f.stall_rate_per_h >= b.stall_rate_per_h:
        return "fix_not_better", "the fix does not stall less often"
    if f.ci95[1] >= b.stall_rate_per_h:
        hours = f.exposure_s / _HOUR_S
        return (
            "inconclusive",
            f"inconclusive: fix observed {hours:.1f} h, not enough to tell "
            f"(its rate could be up to {f.ci95[1]:.2g} per hour, base's is "
            f"{b.stall_rate_per_h:.2g})",
        )
    if p >= ALPHA:
        return "not_significant", "no significant difference"
    return "fix_better", "fix stalls less often"


def onset_spread(rows: Sequence[SeedRow]) -> tuple[float, float, float] | None:
    """(median, min, max) of the first stall's onset over the distinct runs that stalled."""
    onsets = [r.onset_s for r in distinct(rows) if r.onset_s is not None]
    if not onsets:
        return None
    return statistics.median(onsets), min(onsets), max(onsets)


def kaplan_meier(rows: Sequence[SeedRow]) -> tuple[list[float], list[float]]:
    """The Kaplan-Meier estimate of an arm's time to first stall, over engine s of exposure.

    (times, survival): the share of seeds still without a stall just after each time, from
    (0, 1); a seed that did not stall is right-censored at the end of its exposure.
    """
    from scipy.stats import CensoredData, ecdf

    rows = distinct(rows)
    stalled = [r.exposure_s for r in rows if r.stalled]
    clean = [r.exposure_s for r in rows if not r.stalled]
    if not rows:
        return [0.0], [1.0]
    sf = ecdf(CensoredData(uncensored=stalled, right=clean)).sf
    times = [0.0, *(float(t) for t in sf.quantiles)]
    return times, [1.0, *(float(p) for p in sf.probabilities)]
