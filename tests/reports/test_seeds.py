"""Seed statistics: the Fisher exact test against hand-computed values, rows and the verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stallkit.contract.meta import ArmMeta
from stallkit.reports.ab_figures import load_ab, to_json
from stallkit.reports.ab_markdown import seed_cells, to_markdown
from stallkit.reports.rundir import lag_reason
from stallkit.reports.seed_stats import SeedRow, fisher_less, onset_spread, verdict


@pytest.mark.parametrize(
    ("base", "fix", "n", "expected"),
    [
        # C(10,0)C(10,10)/C(20,10): every stalled seed landed in base
        (10, 0, 10, 1 / 184756),
        # K=9 stalled seeds: P(fix=0) = C(9,0)C(11,10)/C(20,10)
        (9, 0, 10, 11 / 184756),
        # 1 of 2 against 0 of 2: C(1,0)C(3,2)/C(4,2)
        (1, 0, 2, 3 / 6),
        # fix stalls as often as base: (C(2,0)C(2,2) + C(2,1)C(2,1))/C(4,2)
        (1, 1, 2, 5 / 6),
        (0, 0, 5, 1.0),
        (0, 3, 3, 1.0),
    ],
)
def test_fisher_one_sided_matches_hand_values(base: int, fix: int, n: int, expected: float) -> None:
    assert fisher_less(base, n, fix, n) == pytest.approx(expected, rel=1e-12)


def test_fisher_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError):
        fisher_less(3, 2, 0, 2)


def _row(seed: int, onset: float | None, exposure_s: float | None = None) -> SeedRow:
    return SeedRow(
        seed=seed,
        stalled=onset is not None,
        kind="spinning" if onset is not None else None,
        onset_s=onset,
        stopped_run=onset is not None,
        turns=10,
        preemptions=1.0,
        restores_recomputed=2,
        decode_tok_s=50.0,
        duration_s=100.0,
        clock="virtual",
        like_for_like=True,
        end_reason="stall_stop" if onset is not None else "duration",
        exposure_s=(onset if onset is not None else 1000.0) if exposure_s is None else exposure_s,
        censored=None,
    )


def test_verdict_and_onset_spread() -> None:
    base = [_row(1, 500.0), _row(2, 900.0), _row(3, 600.0), _row(4, None)]
    fix = [_row(s, None) for s in (1, 2, 3, 4)]
    v = verdict(base, fix)
    assert (v.seeds, v.base_stalled, v.fix_stalled) == (4, 3, 0)
    # exposure: base 500 + 900 + 600 + 1000 s, fix 4000 s; given 3 stalls in all, P(fix has 0)
    # is the base arm's share of the exposure, cubed
    assert (v.base_exposure_s, v.fix_exposure_s) == (3000.0, 4000.0)
    assert v.p_value == pytest.approx((3000 / 7000) ** 3, rel=1e-12)
    assert v.fisher_p == pytest.approx(1 / 14)  # C(3,0)C(5,4)/C(8,4) = 5/70
    assert v.rate_ratio == 0.0
    assert onset_spread(base) == (600.0, 500.0, 900.0)
    assert onset_spread(fix) is None


def test_per_seed_table_and_verdict_from_saved_seed_directories(
    tmp_path: Path, seed_arm: Any
) -> None:
    (tmp_path / "kit.json").write_text(json.dumps({"name": "k"}))
    for seed, onset in ((3, 400.0), (4, 700.0), (5, None)):
        seed_arm(tmp_path, "base", seed, onset)
        seed_arm(tmp_path, "fix", seed, None)
    report = load_ab(tmp_path)
    data = to_json(report)
    v = data["verdict"]
    assert (v["seeds"], v["base_stalled"], v["fix_stalled"]) == (3, 2, 0)
    # exposure until the first onset (400 s, 700 s) or the end (1000 s); fix 3 x 1000 s
    assert (v["base_exposure_s"], v["fix_exposure_s"]) == (2100.0, 3000.0)
    assert v["p_value"] == pytest.approx((2100 / 5100) ** 2)
    assert v["fisher_p"] == pytest.approx(0.2)  # C(2,0)C(4,3)/C(6,3) = 4/20
    assert v["test"] == "poisson_conditional"
    assert data["schema_version"] == 3
    base_rate = data["arms"]["base"]["rate"]
    assert base_rate["stall_rate_per_h"] == pytest.approx(2 / (2100 / 3600))
    assert [r["exposure_s"] for r in data["arms"]["base"]["seeds"]] == [400.0, 700.0, 1000.0]
    assert [r["censored"] for r in data["arms"]["fix"]["seeds"]] == [None, None, None]
    rows = data["arms"]["base"]["seeds"]
    assert [r["seed"] for r in rows] == [3, 4, 5]
    assert [r["onset_s"] for r in rows] == [400.0, 700.0, None]
    for key in ("seed", "stalled", "kind", "onset_s", "stopped_run", "turns", "preemptions"):
        assert key in rows[0]
    assert {"decode_tok_s", "clock", "like_for_like", "restores_recomputed"} <= set(rows[0])
    md = to_markdown(report)
    assert "| stalled seeds | 2 of 3 | 0 of 3 |" in md
    assert "| first stall onset, median (min - max) | 550 s (400 s - 700 s) | - |" in md
    assert "p = 0.17" in md and "Fisher k of N: p = 0.2" in md
    assert "| base | 3 | yes | spinning | 400.0 | yes |" in md
    assert "A/B: k, 3 seeds, virtual clock" in md


def test_lag_reason_from_measured_scale_or_log(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("INFO serving\n")
    wall = ArmMeta(
        arm="fix", spec="sim:fix", kind="sim", clock="wall", time_scale=30.0, end_reason="duration"
    )
    assert lag_reason(wall.update(engine_s_per_wall_s=29.5), log) is None
    assert "27.1x of its nominal 30x" in str(lag_reason(wall.update(engine_s_per_wall_s=27.1), log))
    assert "could not be read" in str(lag_reason(wall, log))
    log.write_text("WARNING simulator is 5.2 wall seconds behind its clock; lower --time-scale\n")
    assert "lag warning" in str(lag_reason(wall.update(engine_s_per_wall_s=30.0), log))
    assert lag_reason(wall.update(clock="virtual", time_scale=1.0), log) is None
    assert lag_reason(wall.update(kind="docker", time_scale=1.0), log) is None


def test_seed_cells_show_a_scraped_counter_as_whole_preemptions() -> None:
    row = _row(7, 412.25).model_copy(update={"preemptions": 27.0})
    cells = seed_cells(row)
    assert cells[:7] == ["7", "yes", "spinning", "412.2", "yes", "10", "27"]
    assert cells[7:] == ["2", "50.0", "virtual", "yes", "-"]
    assert seed_cells(row.model_copy(update={"same_as": 3}))[-1] == "seed 3"
    assert seed_cells(row.model_copy(update={"preemptions": None}))[6] == "-"


@pytest.mark.parametrize(
    ("base", "fix", "says"),
    [
        # (5000 / 15000) ** 10 of the exposure
        (10, 0, "fix stalls less often: p = 1.7e-05 (exact Poisson rate test, one-sided"),
        (0, 0, "inconclusive: base never stalled, nothing for the fix to show"),
        (3, 5, "the fix does not stall less often"),
        (4, 4, "the fix does not stall less often"),
        # fix: 0 in 2.8 h, at most 1.1 per hour; base 2 in 2.6 h, 0.77 per hour
        (2, 0, "inconclusive: fix observed 2.8 h, not enough to tell (its rate could be up to 1.1"),
    ],
)
def test_the_verdict_says_what_its_p_value_does_not_show(base: int, fix: int, says: str) -> None:
    from stallkit.reports.ab_markdown import verdict_cell

    # stalled seeds at 500 s, clean seeds observed 1000 s
    base_rows = [_row(s, 500.0 if s < base else None) for s in range(10)]
    fix_rows = [_row(s, 500.0 if s < fix else None) for s in range(10)]
    assert says in verdict_cell(verdict(base_rows, fix_rows))


def test_a_rate_bound_below_base_with_too_few_stalls_is_not_significant() -> None:
    from stallkit.reports.ab_markdown import verdict_cell

    # base: 1 stall in 1 h; fix: 0 in 4 h (at most 0.75 per hour, below base's 1 per hour), but
    # one stall in all lands in fix with probability 4/5 under equal rates: p = 1/5
    v = verdict([_row(1, 3600.0)], [_row(s, None, exposure_s=3600.0) for s in range(4)])
    assert v.conclusion == "not_significant" and v.p_value == pytest.approx(0.2)
    assert "no significant difference: p = 0.2" in verdict_cell(v)
