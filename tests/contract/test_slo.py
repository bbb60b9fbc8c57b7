"""SLOs and goodput: durations need a unit, margins are 0-100 %, and the figures over turn
records (warm-up left out, failures missed, requests cut short undecided unless already late)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stallkit.contract.records import Outcome, TurnRecord
from stallkit.contract.slo import (
    FIGURES,
    SLO_FIGURES,
    SloConfig,
    SloFigures,
    SloSummary,
    VerdictConfig,
    cut_at,
    figure_value,
    meets_slo,
    parse_seconds,
    request_itl_s,
    slo_figures,
)


def _rec(
    t_start: float,
    ttft: float | None,
    chunks: list[tuple[float, int]],
    t_end: float,
    outcome: Outcome = "ok",
) -> TurnRecord:
    tokens = sum(n for _, n in chunks)
    return TurnRecord(
        agent=0, session=0, turn=0, attempt=0, t_start=t_start, t_end=t_end, ttft_s=ttft,
        chunks=chunks, expected_prompt_tokens=10, prompt_tokens=10, completion_tokens=tokens,
        cached_tokens=0, max_tokens=tokens, outcome=outcome, error=None, status=200,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "seconds"), [("2s", 2.0), ("500ms", 0.5), ("1.5min", 90.0), ("250 us", 0.00025)]
)
def test_durations_are_read_with_their_unit(text: str, seconds: float) -> None:
    assert parse_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", [2, 2.5, "2", "fast", "-1s", "2 parsecs", True])
def test_a_duration_without_a_unit_is_refused(bad: object) -> None:
    with pytest.raises(ValidationError, match=r"unit|not a duration"):
        SloConfig(ttft=bad)


def test_the_config_round_trips_with_units_and_needs_an_objective() -> None:
    slo = SloConfig(ttft="2s", itl="50ms", warmup="60s")
    dumped = slo.model_dump(mode="json")
    assert dumped == {"ttft": "2s", "itl": "50ms", "e2e": None, "warmup": "60s"}
    assert SloConfig.model_validate(dumped) == slo
    with pytest.raises(ValidationError, match="at least one"):
        SloConfig(warmup="10s")


@pytest.mark.parametrize("bad", ["150%", "5", 5, "-1%", "x%"])
def test_a_margin_is_a_percentage_up_to_100(bad: object) -> None:
    with pytest.raises(ValidationError, match=r"percentage|outside"):
        VerdictConfig(margin=bad)
    assert VerdictConfig(margin="100%").margin == 100.0


def test_a_verdict_names_only_tested_figures_and_says_which_are() -> None:
    assert VerdictConfig().figures == list(FIGURES) == ["goodput", "ttft_p99", "throughput"]
    with pytest.raises(ValidationError) as caught:
        VerdictConfig(figures=["goodput", "ttft_p90"])
    message = caught.value.errors()[0]["msg"]
    assert "'ttft_p90' is not a tested figure; name goodput, ttft_p99 or throughput" in message


def test_every_figure_of_the_table_is_a_field_of_a_run_and_of_an_arm() -> None:
    fields = {spec.field for spec in SLO_FIGURES}
    counts = {"window_s", "requests", "met", "censored"}
    assert set(SloFigures.model_fields) == fields | counts
    assert set(SloSummary.model_fields) == fields | {"objectives", "method"}
    goodput = SloFigures.model_fields["goodput_rps"]
    assert goodput.description == "Requests meeting every SLO per engine s."
    with pytest.raises(ValidationError, match="goodput_rps"):  # every figure is required
        SloFigures(window_s=1.0, requests=0, met=0, censored=0)


def test_a_request_meets_its_slos_or_misses_or_is_undecided() -> None:
    slo = SloConfig(ttft="1s", itl="100ms", e2e="5s")
    good = _rec(0, 0.5, [(0.5, 1), (0.8, 4)], 1.0)  # ITL 0.3/4 = 75 ms
    assert request_itl_s(good) == pytest.approx(0.075)
    assert meets_slo(good, slo) is True
    assert meets_slo(good, slo, time_scale=2.0) is False  # ITL 150 engine ms
    assert meets_slo(_rec(0, 1.5, [(1.5, 1)], 1.6), slo) is False  # late first token
    assert meets_slo(_rec(0, 0.5, [(0.5, 1), (1.5, 2)], 1.6), slo) is False  # slow tokens
    assert meets_slo(_rec(0, 0.2, [(0.2, 1)], 0.3, "http_error"), slo) is False
    # cut short by the run's end: undecided while within its objectives, missed once late
    assert meets_slo(_rec(0, None, [], 0.5, "aborted"), slo) is None
    assert meets_slo(_rec(0, None, [], 2.0, "aborted"), slo) is False


def test_figures_leave_out_the_warm_up_and_count_per_second_of_the_window() -> None:
    slo = SloConfig(ttft="1s", warmup="10s")
    records = [
        _rec(1, 5.0, [(5.0, 10)], 6),  # in the warm-up: not counted
        _rec(10, 0.5, [(0.5, 1), (1.5, 9)], 12),
        _rec(12, 0.2, [(0.2, 1), (0.4, 4)], 13),
        _rec(13, 2.0, [(2.0, 5)], 16),  # misses TTFT
        _rec(19, None, [], 20, "aborted"),  # undecided
    ]
    figures = slo_figures(records, slo, end_s=20.0)
    assert (figures.requests, figures.met, figures.censored) == (3, 2, 1)
    assert figures.window_s == 10.0
    assert figures.goodput_rps == pytest.approx(0.2)
    assert figures.attainment_pct == pytest.approx(200 / 3)
    assert figures.request_rps == pytest.approx(0.3)
    assert figures.output_tok_s == pytest.approx(2.0)
    assert figures.ttft_p50_s == 0.5
    assert figures.ttft_p99_s == 2.0
    assert figure_value(figures, "goodput") == pytest.approx(0.2)
    assert figure_value(figures, "ttft_p99") == 2.0


def test_a_wall_clock_run_is_converted_to_engine_seconds() -> None:
    slo = SloConfig(ttft="3s", warmup="30s")
    records = [_rec(0.5, 0.05, [(0.05, 1)], 0.1), _rec(1.0, 0.05, [(0.05, 1)], 1.1)]
    figures = slo_figures(records, slo, end_s=60.0, time_scale=30.0)
    assert (figures.requests, figures.met) == (1, 1)  # the first started at 15 engine s
    assert figures.ttft_p99_s == pytest.approx(1.5)
    assert figures.goodput_rps == pytest.approx(1 / 30)


def test_nothing_counted_is_none_not_zero() -> None:
    figures = slo_figures([], SloConfig(e2e="1s"), end_s=0.0)
    assert figures.goodput_rps is None and figures.attainment_pct is None
    assert figures.ttft_p99_s is None


def test_a_window_that_ends_early_cuts_the_requests_running_at_its_end() -> None:
    slo = SloConfig(ttft="1s", e2e="10s")
    records = [
        _rec(0, 0.5, [(0.5, 1), (1.0, 4)], 2),  # ended inside the window
        _rec(4, 0.5, [(0.5, 1), (3.0, 9)], 8),  # running at 5: its first token only
        _rec(4.5, 2.0, [(2.0, 3)], 7),  # running at 5, no token yet: undecided
        _rec(6, 0.2, [(0.2, 5)], 7),  # started after the window: not counted
    ]
    cut = cut_at(records[1], 5.0)
    assert (cut.t_end, cut.outcome, cut.chunks, cut.completion_tokens) == (
        5.0,
        "aborted",
        [(0.5, 1)],
        None,
    )
    assert cut_at(records[0], 5.0) is records[0]
    figures = slo_figures(records, slo, end_s=5.0)
    assert (figures.requests, figures.met, figures.censored) == (1, 1, 2)
    assert figures.output_tok_s == pytest.approx(6 / 5)  # 5 tokens, then 1 streamed by the cut
    assert figures.window_s == 5.0
