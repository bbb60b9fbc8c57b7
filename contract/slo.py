"""Service-level objectives and goodput: the kit's `[slo]` and `[verdict]`, and pure figures.

A kit's `[slo]` sets what a request must meet to count as good (time to first token, mean
inter-token latency, end-to-end latency; each a duration with its unit, `"2s"` or `"500ms"`,
in engine seconds) and a warm-up window left out of every figure. `slo_figures` computes, over
one arm's turn records from the warm-up's end to the window's end (the run's end, or an earlier
cut, such as an A/B's first stall): the requests meeting every SLO, goodput (those per second
of the window), SLO attainment, TTFT and inter-token latency p50/p99 (over completed requests,
as `vllm bench serve` and AIPerf count them) and throughput. A request cut short by the window's
end whose SLOs were not yet decided is censored (left out, and counted as such); one that had
already missed an SLO counts as missed. A failed request misses. `[verdict]` names the margin and the figures of the non-inferiority test
(`stallkit.reports.noninferiority`). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    model_validator,
)

from stallkit.contract.records import TurnRecord
from stallkit.contract.summary import percentiles

__all__ = [
    "FIGURES",
    "FIGURE_WORDS",
    "Answer",
    "Estimate",
    "Figure",
    "NonInferiority",
    "Percent",
    "Seconds",
    "SloConfig",
    "SloFigures",
    "SloSummary",
    "VerdictConfig",
    "cut_at",
    "figure_value",
    "meets_slo",
    "parse_percent",
    "parse_seconds",
    "request_itl_s",
    "slo_figures",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}
_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-z]+)\s*$")


def parse_seconds(value: object) -> float:
    """Seconds of a duration written with its unit (`"2s"`, `"500ms"`, `"1.5min"`).

    A bare number is refused: a latency objective without a unit is a guess (ValueError).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f'{value!r} is not a duration; write it with a unit, e.g. "2s"')
    if isinstance(value, (int, float)) or re.match(r"^\s*[-+]?[0-9.eE+-]+\s*$", value):
        raise ValueError(f'{value} has no unit; write e.g. "{value}s" or "{value}ms"')
    match = _DURATION_RE.match(value)
    if match is None or match.group(2) not in _UNITS_S:
        raise ValueError(f'{value!r} is not a duration; write e.g. "2s" or "500ms"')
    seconds = float(match.group(1)) * _UNITS_S[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration")
    return seconds


def parse_percent(value: object) -> float:
    """The percentage of `"5%"` (5.0); between 0 and 100 % (ValueError otherwise)."""
    text = str(value).strip() if isinstance(value, (int, float, str)) else ""
    if isinstance(value, bool) or not text.endswith("%"):
        raise ValueError(f'{value!r} is not a percentage; write e.g. "5%"')
    try:
        percent = float(text[:-1])
    except ValueError:
        raise ValueError(f'{value!r} is not a percentage; write e.g. "5%"') from None
    if not 0 <= percent <= 100:
        raise ValueError(f"{value} is outside 0-100 %; a margin is a share of the base's figure")
    return percent


def _seconds_text(seconds: float) -> str:
    return f"{seconds * 1000:g}ms" if 0 < seconds < 1 else f"{seconds:g}s"


#: a duration given with its unit, held in seconds (written back as `"2s"`, `"500ms"`)
Seconds = Annotated[
    float,
    BeforeValidator(parse_seconds),
    PlainSerializer(_seconds_text),
    WithJsonSchema({"type": "string", "pattern": r"^\s*[0-9.eE+-]+\s*(us|ms|s|min|m|h)\s*$"}),
]
#: a percentage given with its sign (`"5%"`), held as 5.0 (written back as `"5%"`)
Percent = Annotated[
    float,
    BeforeValidator(parse_percent),
    PlainSerializer(lambda p: f"{p:g}%"),
    WithJsonSchema({"type": "string", "pattern": r"^\s*[0-9.eE+-]+\s*%$"}),
]

#: the figures a non-inferiority test may be run on
Figure = Literal["goodput", "ttft_p99", "throughput"]
FIGURES: tuple[Figure, ...] = ("goodput", "ttft_p99", "throughput")
#: a figure's name in a sentence
FIGURE_WORDS: dict[Figure, str] = {
    "goodput": "goodput",
    "ttft_p99": "TTFT p99",
    "throughput": "throughput",
}


class SloConfig(BaseModel):
    """The kit's `[slo]`: what a request must meet to count toward goodput (engine seconds)."""

    model_config = _FROZEN
    ttft: Seconds | None = Field(
        None,
        description="time to first token a request must not exceed, with its unit "
        '("2s", "500ms"), engine seconds; unset: no TTFT objective',
        json_schema_extra={"unit": "engine"},
    )
    itl: Seconds | None = Field(
        None,
        description="mean inter-token latency of a request (after its first token) it must not "
        'exceed, with its unit ("50ms"), engine seconds; unset: no ITL objective',
        json_schema_extra={"unit": "engine"},
    )
    e2e: Seconds | None = Field(
        None,
        description='end-to-end latency a request must not exceed, with its unit ("60s"), '
        "engine seconds; unset: no end-to-end objective",
        json_schema_extra={"unit": "engine"},
    )
    warmup: Seconds = Field(
        0.0,
        description="the first stretch of each run left out of every SLO figure (requests "
        'starting in it are not counted), with its unit ("60s"), engine seconds',
        json_schema_extra={"unit": "engine"},
    )

    @model_validator(mode="after")
    def _one_objective(self) -> Self:
        if self.ttft is None and self.itl is None and self.e2e is None:
            raise ValueError('set at least one of ttft, itl, e2e (e.g. ttft = "2s")')
        return self


class VerdictConfig(BaseModel):
    """The kit's `[verdict]`: the non-inferiority test beside the stall test."""

    model_config = _FROZEN
    margin: Percent = Field(
        5.0,
        description='how much worse than the base the fix may be and still pass ("5%"), a '
        "share of the base arm's figure, 0-100 %",
    )
    figures: list[Figure] = Field(
        default_factory=lambda: list(FIGURES),
        min_length=1,
        description="the figures tested: goodput, ttft_p99, throughput (output tokens per s)",
    )


class SloFigures(BaseModel):
    """One run's SLO figures after its warm-up (engine seconds; None where nothing counted)."""

    model_config = _FROZEN
    window_s: float = Field(
        description="Engine seconds from the warm-up's end to the window's end (the run's end, "
        "or an earlier cut such as the first stall of either arm of an A/B)."
    )
    requests: int = Field(description="Requests started in the window whose SLOs were decided.")
    met: int = Field(description="Of those, requests meeting every SLO.")
    censored: int = Field(
        description="Requests cut short by the run's end before their SLOs were decided."
    )
    attainment_pct: float | None = Field(description="Requests meeting every SLO, in %.")
    goodput_rps: float | None = Field(description="Requests meeting every SLO per engine s.")
    request_rps: float | None = Field(description="Completed requests per engine second.")
    output_tok_s: float | None = Field(description="Generated tokens per engine second.")
    ttft_p50_s: float | None = Field(description="Median time to first token, engine s.")
    ttft_p99_s: float | None = Field(description="99th percentile time to first token, engine s.")
    itl_p50_s: float | None = Field(description="Median inter-token latency (per token), engine s.")
    itl_p99_s: float | None = Field(description="99th percentile inter-token latency, engine s.")


class Estimate(BaseModel):
    """One figure of an arm over its distinct seeds: the mean and its 95 % interval."""

    model_config = _FROZEN
    mean: float = Field(description="Mean over the seeds that have the figure.")
    ci95: tuple[float, float] | None = Field(
        description="95 % t interval of the mean over seeds (null: fewer than two seeds)."
    )
    runs: int = Field(description="Distinct seeds the figure is over.")


class SloSummary(BaseModel):
    """An arm's SLO figures over its distinct seeds (repeats counted once), after the warm-up."""

    model_config = _FROZEN
    objectives: SloConfig = Field(description="The kit's SLOs and warm-up (engine seconds).")
    method: str = Field(description="How the intervals were made.")
    goodput_rps: Estimate | None = Field(description="Requests meeting every SLO per engine s.")
    attainment_pct: Estimate | None = Field(description="Requests meeting every SLO, in %.")
    request_rps: Estimate | None = Field(description="Completed requests per engine second.")
    output_tok_s: Estimate | None = Field(description="Generated tokens per engine second.")
    ttft_p50_s: Estimate | None = Field(description="Median time to first token, engine s.")
    ttft_p99_s: Estimate | None = Field(description="99th percentile TTFT, engine s.")
    itl_p50_s: Estimate | None = Field(description="Median inter-token latency, engine s.")
    itl_p99_s: Estimate | None = Field(description="99th percentile inter-token latency, engine s.")


#: the answer of a non-inferiority test
Answer = Literal["yes", "no", "inconclusive"]


class NonInferiority(BaseModel):
    """One figure's test: is the fix not worse than the base by more than the margin?"""

    model_config = _FROZEN
    figure: Figure = Field(description="The figure tested.")
    margin_pct: float = Field(description="The margin, % of the base arm's mean.")
    answer: Answer = Field(
        description="yes: shown not worse by more than the margin; no: shown worse by more "
        "(a regression); inconclusive: neither at the 5 % level, or not enough data to test "
        "(fewer than 2 seeds an arm, or no spread over the seeds: the reason says which)."
    )
    method: str = Field(description="The test.")
    base_mean: float | None = Field(description="The base arm's mean over its seeds.")
    fix_mean: float | None = Field(description="The fix arm's mean over its seeds.")
    base_runs: int = Field(description="Distinct base seeds with the figure.")
    fix_runs: int = Field(description="Distinct fix seeds with the figure.")
    worse_pct: float | None = Field(
        description="How much worse the fix's mean is than the base's, % of the base's "
        "(negative: better)."
    )
    worse_ci90: tuple[float, float] | None = Field(
        description="90 % interval of worse_pct (its upper end below the margin: yes; its "
        "lower end above it: no)."
    )
    p_value: float | None = Field(
        description="One-sided p-value of 'worse by the margin or more' (small: non-inferior)."
    )
    reason: str = Field(description="The answer in one line, with the method and the figures.")


def request_itl_s(record: TurnRecord) -> float | None:
    """A request's mean inter-token latency after its first token, on the run's clock (None:
    fewer than two tokens streamed)."""
    if not record.chunks:
        return None
    later = sum(n for _, n in record.chunks[1:])
    first_n = record.chunks[0][1]
    if later + first_n < 2 or later == 0:
        return None
    return (record.chunks[-1][0] - record.chunks[0][0]) / later


def meets_slo(record: TurnRecord, slo: SloConfig, time_scale: float = 1.0) -> bool | None:
    """Whether a request met every SLO; None when it was cut short before that was decided.

    `time_scale`: engine seconds per second of the record's clock.
    """
    elapsed = (record.t_end - record.t_start) * time_scale
    ttft = None if record.ttft_s is None else record.ttft_s * time_scale
    itl = request_itl_s(record)
    itl = None if itl is None else itl * time_scale
    missed = (
        (slo.e2e is not None and elapsed > slo.e2e)
        or (slo.ttft is not None and (ttft if ttft is not None else elapsed) > slo.ttft)
        or (slo.itl is not None and itl is not None and itl > slo.itl)
    )
    if missed:
        return False
    if record.outcome == "aborted":
        return None  # still within its objectives when the run ended: undecided
    return record.outcome == "ok"


def slo_figures(
    records: Sequence[TurnRecord], slo: SloConfig, *, end_s: float, time_scale: float = 1.0
) -> SloFigures:
    """The SLO figures of one run's records over the window from `slo.warmup` to `end_s`.

    `end_s`: where the window ends, engine seconds (the run's end, or an earlier cut such as
    the first stall of either arm of an A/B); a request still running there is cut short at
    it, as if the run had ended. `time_scale`: engine seconds per second of the records'
    clock (1 on the virtual clock and for real engines).
    """
    cut = end_s / time_scale
    counted = [
        cut_at(r, cut) for r in records if slo.warmup <= r.t_start * time_scale and r.t_start < cut
    ]
    verdicts = [meets_slo(r, slo, time_scale) for r in counted]
    decided = [v for v in verdicts if v is not None]
    met = sum(decided)
    ok = [r for r in counted if r.outcome == "ok"]
    window = max(0.0, end_s - slo.warmup)
    ttft = percentiles([r.ttft_s * time_scale for r in ok if r.ttft_s is not None])
    gaps, weights = _token_gaps(ok, time_scale)
    itl = percentiles(gaps, weights)
    tokens = sum(_generated(r) for r in counted)
    return SloFigures(
        window_s=round(window, 3),
        requests=len(decided),
        met=met,
        censored=len(verdicts) - len(decided),
        attainment_pct=100.0 * met / len(decided) if decided else None,
        goodput_rps=met / window if window > 0 else None,
        request_rps=len(ok) / window if window > 0 else None,
        output_tok_s=tokens / window if window > 0 else None,
        ttft_p50_s=None if ttft is None else ttft.p50,
        ttft_p99_s=None if ttft is None else ttft.p99,
        itl_p50_s=None if itl is None else itl.p50,
        itl_p99_s=None if itl is None else itl.p99,
    )


def cut_at(record: TurnRecord, t: float) -> TurnRecord:
    """The record as it stood at `t` (seconds on its clock): one still running then is cut
    short there, with what it had streamed by then (`aborted`); one that had ended, itself."""
    if record.t_end <= t:
        return record
    offset = t - record.t_start
    chunks = [c for c in record.chunks if c[0] <= offset]
    ttft = record.ttft_s if record.ttft_s is not None and record.ttft_s <= offset else None
    update = {"t_end": t, "chunks": chunks, "ttft_s": ttft, "outcome": "aborted"}
    return record.model_copy(update=update | {"completion_tokens": None, "error": None})


def _generated(record: TurnRecord) -> int:
    if record.completion_tokens is not None:
        return record.completion_tokens
    return record.streamed_tokens


def _token_gaps(records: Sequence[TurnRecord], scale: float) -> tuple[list[float], list[int]]:
    """Per chunk after the first: its gap per token (engine s), weighted by its tokens."""
    gaps: list[float] = []
    weights: list[int] = []
    for record in records:
        for (t_prev, _), (t, n) in zip(record.chunks, record.chunks[1:], strict=False):
            if n > 0:
                gaps.append((t - t_prev) * scale / n)
                weights.append(n)
    return gaps, weights


def figure_value(figures: SloFigures, figure: Figure) -> float | None:
    """The value of a tested figure in one run's SLO figures."""
    values: dict[str, Any] = {
        "goodput": figures.goodput_rps,
        "ttft_p99": figures.ttft_p99_s,
        "throughput": figures.output_tok_s,
    }
    value = values[figure]
    return None if value is None else float(value)
