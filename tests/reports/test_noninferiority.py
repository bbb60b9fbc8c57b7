"""The SLO statistics over seeds: t intervals, and the non-inferiority test (paired by seed or
Welch's), checked against scipy's own tests; each answer (yes, no, inconclusive) reached."""

from __future__ import annotations

import pytest
from scipy import stats

from stallkit.contract.ab import SeedRow
from stallkit.contract.slo import SloConfig, SloFigures, VerdictConfig
from stallkit.reports.noninferiority import (
    noninferiority,
    noninferiority_tests,
    slo_summary,
    t_interval,
)


def test_the_interval_is_scipys_t_interval_cut_to_the_range() -> None:
    values = [0.12, 0.15, 0.11, 0.14]
    est = t_interval(values)
    assert est is not None and est.ci95 is not None
    low, high = stats.t.interval(0.95, 3, loc=est.mean, scale=stats.sem(values))
    assert est.ci95 == pytest.approx((low, high))
    wide = t_interval([0.01, 1.0])
    assert wide is not None and wide.ci95 is not None and wide.ci95[0] == 0.0  # never negative
    one = t_interval([3.0])
    assert one is not None and one.ci95 is None and one.runs == 1
    assert t_interval([]) is None


def test_welchs_p_value_is_scipys_with_the_margin_moved_onto_the_base() -> None:
    base, fix = [10.0, 11.0, 9.5, 10.5], [9.9, 10.4, 10.1, 9.7]
    test = noninferiority("goodput", base, fix, 5.0)
    b = stats.describe(base)
    f = stats.describe(fix)
    scipy_p = stats.ttest_ind_from_stats(
        f.mean, f.variance**0.5, 4, 0.95 * b.mean, b.variance**0.5, 4,
        equal_var=False, alternative="greater",
    ).pvalue  # fmt: skip
    assert test.p_value == pytest.approx(scipy_p)
    assert test.method == "Welch t over seeds"


def test_the_paired_test_is_scipys_one_sample_t_over_the_differences() -> None:
    base, fix = [10.0, 20.0, 30.0, 40.0], [9.9, 20.1, 29.8, 40.0]  # seeds differ, pairs do not
    test = noninferiority("throughput", base, fix, 5.0, paired=True)
    margin = 0.05 * sum(base) / 4
    diffs = [f - b + margin for b, f in zip(base, fix, strict=True)]
    assert test.p_value == pytest.approx(stats.ttest_1samp(diffs, 0, alternative="greater").pvalue)
    assert test.answer == "yes"  # unpaired, the seeds' spread would hide it
    assert noninferiority("throughput", base, fix, 5.0).answer == "inconclusive"


def test_a_tail_latency_that_grew_past_the_margin_is_a_regression() -> None:
    base, fix = [40.0, 42.0, 41.0, 39.0], [52.0, 55.0, 53.0, 50.0]  # TTFT p99: less is better
    test = noninferiority("ttft_p99", base, fix, 5.0, paired=True)
    assert test.answer == "no"
    assert test.worse_pct == pytest.approx(100 * (52.5 - 40.5) / 40.5)
    assert test.worse_ci90 is not None and test.worse_ci90[0] > 5.0
    assert test.reason.startswith("fix is not worse than base by more than 5 % on TTFT p99: no (")
    better = noninferiority("ttft_p99", fix, base, 5.0, paired=True)
    assert better.answer == "yes" and better.worse_pct is not None and better.worse_pct < 0


def test_too_few_seeds_or_a_zero_base_is_inconclusive() -> None:
    one = noninferiority("goodput", [1.0], [0.1], 5.0)
    assert one.answer == "inconclusive" and "at least 2 distinct seeds" in one.reason
    assert ": not enough data (" in one.reason
    zero = noninferiority("goodput", [0.0, 0.0], [0.1, 0.2], 5.0)
    assert zero.answer == "inconclusive" and "base's figure is 0" in zero.reason


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "welch"])
def test_no_spread_over_the_seeds_is_not_enough_data_never_a_p_of_0(paired: bool) -> None:
    """A zero standard error gave p = 0 and a zero-width "90 % interval" (+0.0 to +0.0): a
    yes (or no) that meant nothing, as when interrupted seeds cut both arms at one moment."""
    for base, fix in (([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]), ([1.0, 1.0], [0.5, 0.5])):
        test = noninferiority("ttft_p99", base, fix, 5.0, paired=paired)
        assert test.answer == "inconclusive"
        assert test.p_value is None and test.worse_ci90 is None
        assert "on TTFT p99: not enough data (" in test.reason
        assert "p = " not in test.reason and "interval +" not in test.reason


def _row(seed: int, goodput: float, same_as: int | None = None) -> SeedRow:
    figures = SloFigures(
        window_s=100.0, requests=10, met=5, censored=0, attainment_pct=50.0,
        goodput_rps=goodput, request_rps=0.1, output_tok_s=10.0, ttft_p50_s=1.0,
        ttft_p99_s=2.0, itl_p50_s=0.01, itl_p99_s=0.02,
    )  # fmt: skip
    return SeedRow(
        seed=seed, stalled=False, kind=None, onset_s=None, stopped_run=False, turns=10,
        preemptions=None, restores_recomputed=None, decode_tok_s=None, duration_s=100.0,
        clock="virtual", like_for_like=True, end_reason="duration", exposure_s=100.0,
        censored=None, same_as=same_as, slo=figures,
    )  # fmt: skip


def test_arms_over_the_same_seeds_are_paired_and_repeats_count_once() -> None:
    base = [_row(1, 0.10), _row(2, 0.20), _row(3, 0.30)]
    fix = [_row(1, 0.101), _row(2, 0.199), _row(3, 0.302)]  # each pair alike, seeds not
    settings = VerdictConfig(figures=["goodput"])
    (paired,) = noninferiority_tests(base, fix, settings)
    assert paired.method == "paired t over seeds" and paired.answer == "yes"
    fix[2] = _row(3, 0.302, same_as=1)  # a repeat: the seeds no longer match
    (unpaired,) = noninferiority_tests(base, fix, settings)
    assert unpaired.method == "Welch t over seeds" and unpaired.fix_runs == 2
    summary = slo_summary(base, SloConfig(ttft="2s"))
    assert summary.goodput_rps is not None and summary.goodput_rps.mean == pytest.approx(0.2)
    assert summary.goodput_rps.runs == 3
