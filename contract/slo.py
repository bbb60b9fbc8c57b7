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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    WithJsonSchema,
    create_model,
    model_validator,
)

from stallkit.contract.records import TurnRecord
from stallkit.contract.summary import percentiles

__all__ = [
    "FIGURES",
    "SLO_FIGURES",
    "Answer",
    "Direction",
    "Estimate",
    "Figure",
    "FigureSpec",
    "NonInferiority",
    "Percent",
    "Seconds",
    "SloConfig",
    "SloFigures",
    "SloSummary",
    "VerdictConfig",
    "cut_at",
    "figure_spec",
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

Direction = Literal["higher", "lower"]


@dataclass(frozen=True)
class FigureSpec:
    """One SLO figure, declared once: the run's and the arm's fields, the A/B table's row and,
    where `tested`, a figure the non-inferiority test may be run on.

    `unit`: `%` (a share of the requests, at most 100), `s` (a latency, engine seconds, shown
    as a duration), else a rate per engine second; `direction`: which way is better.
    """

    key: str
    field: str
    unit: str
    direction: Direction
    measured: str
    description: str
    label: str
    short_label: str = ""
    words: str = ""
    shown: bool = True
    tested: bool = False

    @property
    def sentence_name(self) -> str:
        """The figure's name in a sentence (`TTFT p99`)."""
        return self.words or self.label

    @property
    def high(self) -> float:
        """The figure's upper bound (a share is at most 100 %)."""
        return 100.0 if self.unit == "%" else math.inf

    def value(self, figures: SloFigures) -> float | None:
        """The figure in one run's SLO figures."""
        value = getattr(figures, self.field)
        return None if value is None else float(value)

    def estimate(self, summary: SloSummary) -> Estimate | None:
        """The figure's estimate over an arm's seeds."""
        estimate: Estimate | None = getattr(summary, self.field)
        return estimate


#: the SLO figures, in the A/B table's order (ab.json's fields: rates, then latencies)
SLO_FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(
        "goodput", "goodput_rps", "req/s", "higher",
        "requests meeting every SLO / engine seconds of the window",
        "Requests meeting every SLO per engine s.",
        "goodput, requests/s meeting every SLO (95 % CI)", "goodput req/s (95 %)", "goodput",
        tested=True,
    ),
    FigureSpec(
        "attainment", "attainment_pct", "%", "higher",
        "requests meeting every SLO / requests whose SLOs were decided",
        "Requests meeting every SLO, in %.", "SLO attainment",
    ),
    FigureSpec(
        "request_rate", "request_rps", "req/s", "higher",
        "completed requests / engine seconds of the window",
        "Completed requests per engine second.", "completed requests/s", shown=False,
    ),
    FigureSpec(
        "ttft_p50", "ttft_p50_s", "s", "lower", "median over completed requests",
        "Median time to first token, engine s.", "TTFT p50",
    ),
    FigureSpec(
        "ttft_p99", "ttft_p99_s", "s", "lower", "99th percentile over completed requests",
        "99th percentile time to first token, engine s.", "TTFT p99", tested=True,
    ),
    FigureSpec(
        "itl_p50", "itl_p50_s", "s", "lower",
        "median over the tokens of completed requests (each chunk's gap per token)",
        "Median inter-token latency (per token), engine s.", "ITL p50",
    ),
    FigureSpec(
        "itl_p99", "itl_p99_s", "s", "lower",
        "99th percentile over the tokens of completed requests (each chunk's gap per token)",
        "99th percentile inter-token latency, engine s.", "ITL p99",
    ),
    FigureSpec(
        "throughput", "output_tok_s", "tok/s", "higher",
        "tokens generated by the requests counted / engine seconds of the window",
        "Generated tokens per engine second.", "throughput, output tok/s", "output tok/s",
        "throughput", tested=True,
    ),
)  # fmt: skip
_BY_KEY = {spec.key: spec for spec in SLO_FIGURES}
#: the figures a non-inferiority test may be run on, by key
FIGURES: tuple[str, ...] = tuple(spec.key for spec in SLO_FIGURES if spec.tested)


def figure_spec(key: str) -> FigureSpec:
    """The figure named `key` (KeyError: no such figure)."""
    return _BY_KEY[key]


def _tested(value: str) -> str:
    if value not in FIGURES:
        raise ValueError(f"{value!r} is not a tested figure; name {_either(FIGURES)}")
    return value


def _either(names: Sequence[str]) -> str:
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


#: a figure the non-inferiority test may be run on (one of FIGURES)
Figure = Annotated[
    str, AfterValidator(_tested), WithJsonSchema({"enum": list(FIGURES), "type": "string"})
]


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
        description=f"the figures tested: {', '.join(FIGURES)} (throughput: output tokens per s)",
    )


class Estimate(BaseModel):
    """One figure of an arm over its distinct seeds: the mean and its 95 % interval."""

    model_config = _FROZEN
    mean: float = Field(description="Mean over the seeds that have the figure.")
    ci95: tuple[float, float] | None = Field(
        description="95 % t interval of the mean over seeds (null: fewer than two seeds)."
    )
    runs: int = Field(description="Distinct seeds the figure is over.")


class _RunCounts(BaseModel):
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


class _ArmObjectives(BaseModel):
    model_config = _FROZEN
    objectives: SloConfig = Field(description="The kit's SLOs and warm-up (engine seconds).")
    method: str = Field(description="How the intervals were made.")


def _with_figures(base: type[BaseModel], name: str, doc: str, kind: Any) -> Any:
    """`base` plus one field per SLO figure of type `kind` (None where nothing counted).

    ab.json's field order: the rates, then the latencies; in one run's figures, the share of
    the requests (attainment) first, beside the counts it is made of.
    """
    per_run = base is _RunCounts
    order = sorted(SLO_FIGURES, key=lambda f: (per_run and f.unit != "%", f.unit == "s"))
    fields: dict[str, Any] = {
        f.field: (kind | None, Field(description=f.description, json_schema_extra=_extra(f)))
        for f in order
    }
    return create_model(name, __base__=base, __module__=__name__, __doc__=doc, **fields)


def _extra(spec: FigureSpec) -> dict[str, JsonValue]:
    return {"measured": spec.measured, "better": spec.direction}


if TYPE_CHECKING:  # the figures' fields come from SLO_FIGURES: read them through FigureSpec

    class SloFigures(_RunCounts):
        def __getattr__(self, name: str) -> float | None: ...

    class SloSummary(_ArmObjectives):
        def __getattr__(self, name: str) -> Estimate | None: ...

else:
    SloFigures = _with_figures(
        _RunCounts,
        "SloFigures",
        "One run's SLO figures after its warm-up (engine seconds; None where nothing counted).",
        float,
    )
    SloSummary = _with_figures(
        _ArmObjectives,
        "SloSummary",
        "An arm's SLO figures over its distinct seeds (repeats counted once), after the warm-up.",
        Estimate,
    )


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


def figure_value(figures: SloFigures, figure: str) -> float | None:
    """The value of a figure (by key: `goodput`) in one run's SLO figures."""
    return figure_spec(figure).value(figures)
