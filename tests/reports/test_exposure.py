"""Exposure, censoring, stall rates and the verdict of an arm that ended early.

The intervals and tests are checked against `scipy.stats` and against published values; the
verdict of a fix arm whose engine died in every seed is read from saved run directories.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import binomtest, chi2

from stallkit.contract.timeline import DownLine, SampleLine, StallStartedLine, TimelineLine
from stallkit.kits.ab.execute import strict_failures
from stallkit.reports.ab_figures import load_ab, to_json
from stallkit.reports.ab_markdown import to_markdown
from stallkit.reports.exposure import loaded_s, observe, pending_intervals
from stallkit.reports.seed_stats import garwood_per_h, rate_test_less


@pytest.mark.parametrize(
    ("k", "low", "high"),
    # Garwood's exact 95 % limits for a Poisson count (the table in every reference on it)
    [(1, 0.0253, 5.5716), (2, 0.2422, 7.2247), (5, 1.6235, 11.6683), (10, 4.7954, 18.3904)],
)
def test_garwood_limits_per_hour_match_the_published_table(k: int, low: float, high: float) -> None:
    got = garwood_per_h(k, 3600.0)
    assert got[0] == pytest.approx(low, abs=1e-4) and got[1] == pytest.approx(high, abs=1e-4)
    assert garwood_per_h(k, 7200.0) == pytest.approx((low / 2, high / 2), abs=1e-4)


def test_no_stall_gives_the_one_sided_upper_bound() -> None:
    # "0 in 15.0 h (at most 0.20 per hour, 95 %)": -ln(0.05) / 15
    low, high = garwood_per_h(0, 15 * 3600.0)
    assert low == 0.0
    assert high == pytest.approx(chi2.ppf(0.95, 2) / 2 / 15) == pytest.approx(0.1997, abs=1e-4)


@pytest.mark.parametrize(
    ("b", "tb", "f", "tf"), [(10, 7.0, 0, 15.0), (5, 2.0, 2, 2.0), (3, 1.0, 4, 9.0), (1, 1, 0, 4)]
)
def test_rate_test_is_the_binomial_given_both_counts(b: int, tb: float, f: int, tf: float) -> None:
    expected = binomtest(f, b + f, tf / (tb + tf), alternative="less").pvalue
    assert rate_test_less(b, tb * 3600, f, tf * 3600) == pytest.approx(expected, rel=1e-12)
    if f == 0:  # P(all stalls land in base) = base's share of the exposure, to the power b + f
        assert rate_test_less(b, tb, f, tf) == pytest.approx((tb / (tb + tf)) ** b, rel=1e-12)


def test_no_stall_in_either_arm_tests_nothing() -> None:
    assert rate_test_less(0, 100.0, 0, 100.0) == 1.0


def _s(t: float) -> SampleLine:
    return SampleLine(t=t, running=1)


def test_time_with_metrics_down_is_not_exposure() -> None:
    events: list[TimelineLine] = [_s(0), _s(10), DownLine(t=20, error="x")]
    events += [DownLine(t=30, error="x"), _s(50), _s(60)]
    seen = observe(events, 1.0, 100.0, None, "duration")
    assert (seen.exposure_s, seen.censored) == (70.0, None)  # 0-20 and 50-100
    # on the wall clock times are scaled to engine seconds
    assert observe(events, 10.0, 1000.0, None, "duration").exposure_s == 700.0


def test_metrics_down_until_the_end_is_censored() -> None:
    events: list[TimelineLine] = [_s(0), _s(10), DownLine(t=20, error="connection refused")]
    seen = observe(events, 1.0, 100.0, None, "duration")
    assert (seen.exposure_s, seen.censored) == (20.0, "metrics_down")
    assert observe([], 1.0, 100.0, None, "duration").censored == "metrics_down"


def test_exposure_ends_at_the_first_onset_and_a_stall_is_never_censored() -> None:
    events: list[TimelineLine] = [_s(0), _s(10), StallStartedLine(t=80, onset=40, kind="frozen")]
    events.append(_s(90))
    seen = observe(events, 1.0, 90.0, 40.0, "engine_died")
    assert (seen.exposure_s, seen.censored) == (40.0, None)


def test_an_early_end_without_a_stall_is_censored_with_its_reason() -> None:
    seen = observe([_s(0), _s(10)], 1.0, 30.0, None, "engine_died")
    assert (seen.exposure_s, seen.censored) == (30.0, "engine_died")


def _die_at(seed_dir: Path, t_s: float) -> None:
    """Rewrite a saved seed as an engine that died `t_s` engine seconds in."""
    meta = json.loads((seed_dir / "meta.json").read_text())
    meta |= {"end_reason": "engine_died", "engine_s": t_s, "wall_s": t_s}
    meta |= {"error": "sim:fix died during the run (exit code 1)"}
    (seed_dir / "meta.json").write_text(json.dumps(meta))
    lines = (seed_dir / "timeline.jsonl").read_text().splitlines()
    kept = [ln for ln in lines if json.loads(ln)["t"] <= t_s]
    (seed_dir / "timeline.jsonl").write_text("".join(ln + "\n" for ln in kept))


def _fix_dies(root: Path, seed_arm: Any, seeds: int = 10) -> None:
    (root / "kit.json").write_text(json.dumps({"name": "k"}))
    for seed in range(seeds):
        seed_arm(root, "base", seed, 400.0)
        _die_at(seed_arm(root, "fix", seed, None), 30.0)


def test_a_fix_arm_whose_engine_dies_in_every_seed_is_censored_not_clean(
    tmp_path: Path, seed_arm: Any
) -> None:
    _fix_dies(tmp_path, seed_arm)
    report = load_ab(tmp_path)
    v = report.verdict
    assert v is not None
    assert v.conclusion == "inconclusive" and v.fisher_p is None
    assert (v.fix_censored, v.fix_exposure_s) == (10, 300.0)
    assert "fix observed 0.1 h, not enough to tell" in v.reason
    md = to_markdown(report)
    assert "fix stalls less often" not in md
    assert "| stalled seeds | 10 of 10 | 0 of 10 (10 censored: 10 engine died) |" in md
    assert "fix (sim:fix) ended early in 10 of 10 seeds (ended when its engine died in 10" in md
    assert "0 in 0.1 h (at most 36 per hour, 95 %)" in md
    seeds = to_json(report)["arms"]["fix"]["seeds"]
    assert {(r["censored"], r["exposure_s"]) for r in seeds} == {("engine_died", 30.0)}
    assert "fix arm's engine died in 10 of 10 seeds" in "; ".join(strict_failures(report))


def test_a_later_seeds_early_end_is_kept_over_the_first_seeds(
    tmp_path: Path, seed_arm: Any
) -> None:
    (tmp_path / "kit.json").write_text(json.dumps({"name": "k"}))
    for seed in range(3):
        seed_arm(tmp_path, "base", seed, 400.0 if seed == 0 else None)
        d = seed_arm(tmp_path, "fix", seed, None)
        if seed == 2:
            _die_at(d, 500.0)
    report = load_ab(tmp_path)
    assert report.arms["base"].end_reason == "stall_stop"
    assert report.arms["fix"].end_reason == "engine_died"
    assert report.arms["fix"].censored == "engine_died"
    assert strict_failures(report) == ["fix arm's engine died in 1 of 3 seeds"]


def test_kaplan_meier_counts_censored_seeds_as_at_risk_until_they_end(
    tmp_path: Path, seed_arm: Any
) -> None:
    from stallkit.reports.seed_stats import kaplan_meier

    (tmp_path / "kit.json").write_text(json.dumps({"name": "k"}))
    for seed, onset in ((1, 400.0), (2, 700.0), (3, None), (4, None)):
        seed_arm(tmp_path, "base", seed, onset)
        d = seed_arm(tmp_path, "fix", seed, None)
    _die_at(d, 30.0)
    report = load_ab(tmp_path)
    # base: 4 at risk, a stall at 400 s (3/4 left), 3 at risk, one at 700 s (1/2 left)
    assert kaplan_meier(report.seeds["base"]) == ([0.0, 400.0, 700.0, 1000.0], [1, 0.75, 0.5, 0.5])
    # fix: no stall; the seed that died at 30 s leaves the risk set without an event
    assert kaplan_meier(report.seeds["fix"]) == ([0.0, 30.0, 1000.0], [1.0, 1.0, 1.0])


def test_kit_report_strict_fails_on_a_fix_arm_that_died(tmp_path: Path, seed_arm: Any) -> None:
    from typer.testing import CliRunner

    from stallkit.kits.cli import app

    _fix_dies(tmp_path, seed_arm, seeds=3)
    done = CliRunner().invoke(app, ["report", str(tmp_path), "--strict"])
    assert done.exit_code == 1
    assert "strict: fix arm's engine died in 3 of 3 seeds" in done.output
    assert (tmp_path / "ab.md").exists()  # the reports were written all the same
    assert CliRunner().invoke(app, ["report", str(tmp_path)]).exit_code == 0


def test_idle_time_is_not_exposure() -> None:
    # work pending from 0 to 30 s (gauges), then the engine idles with /metrics answering
    events: list[TimelineLine] = [SampleLine(t=0, running=2), SampleLine(t=10, waiting=1)]
    events += [SampleLine(t=30, running=0, waiting=0), SampleLine(t=60, running=0, waiting=0)]
    seen = observe(events, 1.0, 1000.0, None, "duration")
    assert (seen.exposure_s, seen.censored) == (30.0, None)
    assert loaded_s(events, 1.0, 1000.0) == 30.0
    # on the wall clock the same stretches in engine seconds
    assert observe(events, 10.0, 10000.0, None, "duration").exposure_s == 300.0


def test_requests_in_flight_are_pending_work_even_when_the_gauges_read_idle() -> None:
    # a wedge whose gauges say idle: the agents' own requests show the work that is pending
    events: list[TimelineLine] = [SampleLine(t=t, running=0, waiting=0) for t in range(0, 100, 10)]
    flights = [(5.0, 25.0), (20.0, 40.0), (70.0, 75.0)]
    assert observe(events, 1.0, 100.0, None, "duration", flights).exposure_s == 40.0
    assert loaded_s(events, 1.0, 100.0, flights) == 40.0
    # but not while the metrics were down, nor after the first stall's onset
    down: list[TimelineLine] = [*events, DownLine(t=31, error="x")]
    assert observe(down, 1.0, 100.0, None, "duration", flights).exposure_s == 26.0 + 5.0
    assert observe(events, 1.0, 100.0, 22.0, "stall_stop", flights).exposure_s == 17.0


def test_pending_stretches_and_flights_are_one_union() -> None:
    events: list[TimelineLine] = [SampleLine(t=0, running=1), SampleLine(t=10, running=0)]
    assert pending_intervals(events, [(5.0, 20.0), (30.0, 31.0)], 50.0) == [
        (0.0, 20.0),
        (30.0, 31.0),
    ]
