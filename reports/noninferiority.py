"""Statistics over seeds for the SLO figures: intervals per arm and the non-inferiority test.

Pure functions over the per-seed SLO figures (`stallkit.contract.slo`). Seeds are the unit:
each distinct seed (repeats counted once, `stallkit.reports.seed_stats.distinct`) gives one
value of each figure. Per arm, a figure's interval is the 95 % t interval of the mean over its
seeds (cut to the figure's range). The non-inferiority test asks whether the fix is worse than
the base by less than a margin, a share of the base's mean. With d the fix's mean shortfall
(base minus fix for goodput and throughput, fix minus base for TTFT p99) as a % of the base's
mean: when both arms ran the same seeds, each seed's two values are one pair (the same workload
over the same window) and d's standard error is that of the per-seed differences (a paired t,
n - 1 degrees of freedom); otherwise Welch's. "yes" when the one-sided t test of "d is the
margin or more" rejects at 5 % (equivalently d's 90 % interval lies below the margin), "no" (a
regression) when that interval lies above the margin, "inconclusive" otherwise. With fewer than
two seeds an arm, or no spread at all (every seed's value, or difference, the same: a standard
error of 0 gives no interval and no p-value, only a zero-width "interval" and a p of 0), the
answer is inconclusive and says "not enough data". The numbers come from `scipy.stats`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from stallkit.contract.ab import SeedRow
from stallkit.contract.slo import (
    SLO_FIGURES,
    Answer,
    Estimate,
    NonInferiority,
    SloConfig,
    SloFigures,
    SloSummary,
    VerdictConfig,
    figure_spec,
    figure_value,
)
from stallkit.reports.seed_stats import ALPHA, distinct

__all__ = [
    "METHOD",
    "NOT_ENOUGH",
    "PAIRED",
    "WELCH",
    "noninferiority",
    "noninferiority_tests",
    "slo_summary",
    "t_interval",
]

#: how the arms' intervals are made
METHOD = "95 % t interval of the mean over seeds"
#: the non-inferiority test, in words: paired by seed (both arms ran the same seeds), or not
PAIRED = "paired t over seeds"
WELCH = "Welch t over seeds"
#: what an inconclusive test says when its data cannot decide anything (too few seeds, no spread)
NOT_ENOUGH = "not enough data"


def t_interval(
    values: Sequence[float], low: float = 0.0, high: float = math.inf
) -> Estimate | None:
    """The mean of `values` and its 95 % t interval, cut to the figure's range [`low`, `high`]
    (a rate or a latency is never negative); None without values, no interval for one."""
    from scipy.stats import t

    if not values:
        return None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Estimate(mean=mean, ci95=None, runs=1)
    half = float(t.ppf(1 - ALPHA / 2, len(values) - 1)) * statistics.stdev(values)
    half /= math.sqrt(len(values))
    ci = (max(low, mean - half), min(high, mean + half))
    return Estimate(mean=mean, ci95=ci, runs=len(values))


def _seed_figures(rows: Sequence[SeedRow]) -> list[SloFigures]:
    return [r.slo for r in distinct(rows) if r.slo is not None]


def slo_summary(rows: Sequence[SeedRow], objectives: SloConfig) -> SloSummary:
    """An arm's SLO figures over its distinct seeds, each with its 95 % interval."""
    figures = _seed_figures(rows)
    estimates = {
        spec.field: t_interval(
            [v for v in (spec.value(f) for f in figures) if v is not None], high=spec.high
        )
        for spec in SLO_FIGURES
    }
    return SloSummary(objectives=objectives, method=METHOD, **estimates)


def noninferiority(
    figure: str,
    base: Sequence[float],
    fix: Sequence[float],
    margin_pct: float,
    paired: bool = False,
) -> NonInferiority:
    """Whether the fix is not worse than the base by more than `margin_pct` % on `figure`.

    `paired`: `base[i]` and `fix[i]` are one seed's (the same workload over the same window),
    so the test is over the per-seed differences; else the arms are independent (Welch).
    """
    if paired and len(base) != len(fix):
        raise ValueError("paired figures need one value per seed in each arm")
    b = statistics.fmean(base) if base else None
    f = statistics.fmean(fix) if fix else None
    worse = None if b is None or f is None or b <= 0 else _worse(figure, b, f)
    result = NonInferiority(
        figure=figure,
        margin_pct=margin_pct,
        answer="inconclusive",
        method=PAIRED if paired else WELCH,
        base_mean=b,
        fix_mean=f,
        base_runs=len(base),
        fix_runs=len(fix),
        worse_pct=worse,
        worse_ci90=None,
        p_value=None,
        reason="",
    )
    if worse is None or b is None or len(base) < 2 or len(fix) < 2:
        if b is not None and b <= 0 and f is not None:
            return _said(result, "the base's figure is 0")
        return _said(result, "needs at least 2 distinct seeds per arm", NOT_ENOUGH)
    if paired:
        diffs = [x - y for x, y in zip(base, fix, strict=True)]
        se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    else:
        se = math.sqrt(_var_of_mean(base) + _var_of_mean(fix))
    se_pct = 100.0 * se / b
    if se_pct == 0:  # no spread: a zero-width interval and a p of 0 or 1 would mean nothing
        spread = "every seed's difference" if paired else "every seed's value in each arm"
        return _said(result, f"{spread} is the same, so no interval", NOT_ENOUGH)
    df = float(len(base) - 1) if paired else _welch_df(base, fix)
    from scipy.stats import t

    p = float(t.sf((margin_pct - worse) / se_pct, df))
    half = float(t.ppf(1 - ALPHA, df)) * se_pct
    ci = (worse - half, worse + half)
    answer: Answer = "yes" if ci[1] < margin_pct else "no" if ci[0] > margin_pct else "inconclusive"
    return _said(result.model_copy(update=_decided(answer, ci, p)))


def _decided(answer: Answer, ci: tuple[float, float], p: float) -> dict[str, object]:
    return {"answer": answer, "worse_ci90": ci, "p_value": p}


def _worse(figure: str, base: float, fix: float) -> float:
    """How much worse the fix is than the base, % of the base (negative: better)."""
    higher_better = figure_spec(figure).direction == "higher"
    shortfall = base - fix if higher_better else fix - base
    return 100.0 * shortfall / base


def _var_of_mean(values: Sequence[float]) -> float:
    return statistics.variance(values) / len(values)


def _welch_df(base: Sequence[float], fix: Sequence[float]) -> float:
    vb, vf = _var_of_mean(base), _var_of_mean(fix)
    terms = (vb * vb / (len(base) - 1) if vb else 0.0) + (vf * vf / (len(fix) - 1) if vf else 0.0)
    return (vb + vf) ** 2 / terms


def _said(test: NonInferiority, why: str = "", answer: str | None = None) -> NonInferiority:
    """The test with its sentence: `fix is not worse than base by more than 5 % on goodput:
    yes (Welch t over seeds, 10+10 seeds, p = 0.002; worse by -1.2 % (90 % interval ...))`;
    `answer`: the words in place of the answer (`not enough data`)."""
    runs = f"{test.base_runs}+{test.fix_runs} seeds"  # distinct seeds of each arm
    if test.method == PAIRED:
        runs = f"{test.base_runs} seed{'s' if test.base_runs != 1 else ''}"
    worse, ci, p = test.worse_pct, test.worse_ci90, test.p_value
    if ci is not None and p is not None and worse is not None:
        detail = f"{test.method}, {runs}, p = {p:.3g}; worse by {worse:+.1f} % (90 % interval "
        detail += f"{ci[0]:+.1f} to {ci[1]:+.1f})"
    else:
        detail = f"{why}; {runs}" + ("" if worse is None else f"; worse by {worse:+.1f} %")
    words = figure_spec(test.figure).sentence_name
    head = f"fix is not worse than base by more than {test.margin_pct:g} % on {words}"
    said = test.answer if answer is None else answer
    return test.model_copy(update={"reason": f"{head}: {said} ({detail})"})


def noninferiority_tests(
    base: Sequence[SeedRow], fix: Sequence[SeedRow], settings: VerdictConfig
) -> list[NonInferiority]:
    """The kit's non-inferiority tests over both arms' distinct seeds: paired by seed when
    both arms ran the same seeds, else Welch's."""
    out = []
    for figure in settings.figures:
        b, f = _values(base, figure), _values(fix, figure)
        paired = b.keys() == f.keys() and None not in b
        seeds = list(b) if paired else []
        if paired:
            out.append(
                noninferiority(
                    figure, [b[k] for k in seeds], [f[k] for k in seeds], settings.margin, True
                )
            )
        else:
            out.append(noninferiority(figure, list(b.values()), list(f.values()), settings.margin))
    return out


def _values(rows: Sequence[SeedRow], figure: str) -> dict[int | None, float]:
    """A figure's value per distinct seed that has it."""
    out = {}
    for row in distinct(rows):
        value = None if row.slo is None else figure_value(row.slo, figure)
        if value is not None:
            out[row.seed] = value
    return out
