"""The A/B table's SLO rows: each arm's goodput, attainment, latency percentiles and throughput
over its seeds with 95 % intervals, and the non-inferiority answers, from an `ABReport`.

Shown only when the kit sets `[slo]` (other kits' tables are unchanged). Every figure covers,
per seed, the same window in every arm: from the warm-up's end to the first stall or the end of
any arm in that seed, so the arms are compared over the time all of them served (how often they
stall is the stall test's question); times are engine seconds. `ab.md`, `ab.html` and the rich table
take these rows through `stallkit.reports.ab_markdown.table_rows`.
"""

from __future__ import annotations

from stallkit.contract.slo import SLO_FIGURES, Estimate, FigureSpec, SloConfig, SloSummary
from stallkit.reports.ab_figures import ABReport

__all__ = ["NONINFERIOR", "SHOWN", "estimate_cell", "objectives_text", "slo_rows"]

#: the key of a non-inferiority row (its cell is in the fix arm's column)
NONINFERIOR = "noninferior"

Row = tuple[str, str, list[str]]
#: the figures the A/B table shows, in its order
SHOWN: tuple[FigureSpec, ...] = tuple(f for f in SLO_FIGURES if f.shown)
#: the SLO row's label: each seed's window is the same in every arm
_SLO_LABEL = "SLOs (each seed from its warm-up to the first stall or end in either arm)"


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms" if 0 < seconds < 1 else f"{seconds:.3g} s"


def objectives_text(slo: SloConfig) -> str:
    """`TTFT <= 60 s, ITL <= 100 ms; first 300 s left out`."""
    parts = [
        f"{name} \u2264 {_duration(value)}"
        for name, value in (("TTFT", slo.ttft), ("ITL", slo.itl), ("end to end", slo.e2e))
        if value is not None
    ]
    warmup = f"; first {_duration(slo.warmup)} left out" if slo.warmup else ""
    return ", ".join(parts) + warmup


def estimate_cell(estimate: Estimate | None, unit: str = "", seconds: bool = False) -> str:
    """`0.138 (0.128 - 0.148)`: the mean over seeds and its 95 % interval; `n/a` when none."""
    if estimate is None:
        return "n/a"

    def fmt(value: float) -> str:
        return _duration(value) if seconds else f"{value:.3g}{unit}"

    cell = fmt(estimate.mean)
    if estimate.ci95 is not None:
        cell += f" ({fmt(estimate.ci95[0])} - {fmt(estimate.ci95[1])})"
    return cell


def _figure_rows(summaries: list[SloSummary | None]) -> list[Row]:
    def cells(spec: FigureSpec) -> list[str]:
        # a share carries its sign; a latency is a duration; a rate is a bare number
        unit, seconds = (" %" if spec.unit == "%" else ""), spec.unit == "s"
        return [
            "n/a" if s is None else estimate_cell(spec.estimate(s), unit, seconds)
            for s in summaries
        ]

    return [(spec.key, spec.label, cells(spec)) for spec in SHOWN]


def slo_rows(report: ABReport) -> list[Row]:
    """The SLO rows in table order (none when the kit sets no SLOs)."""
    if not report.slo:
        return []
    names = list(report.arms)
    summaries = [report.slo.get(n) for n in names]
    first = next(s for s in summaries if s is not None)
    rows: list[Row] = [("slo", _SLO_LABEL, [objectives_text(first.objectives)] * len(names))]
    rows += _figure_rows(summaries)
    verdict = report.verdict
    for test in verdict.noninferiority or [] if verdict is not None else []:
        label = test.reason.partition(":")[0]
        answer = test.reason[len(label) + 2 :]
        rows.append((NONINFERIOR, label, [answer if n == "fix" else "" for n in names]))
    return rows
