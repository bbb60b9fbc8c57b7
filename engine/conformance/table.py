"""The short table `kit engine conformance` prints: a `ConformanceReport` as plain text lines.

It only describes: the command line writes the lines. The counts of each run side by side,
the tests that built a scheduler other than the candidate, the differences one per line, the
tests failing on both runs grouped by reason (those that could not run here marked), and the
verdict.
"""

from __future__ import annotations

import json

from stallkit.engine.conformance.junit import Outcome, ReasonGroup, TestOutcome
from stallkit.engine.conformance.run import ConformanceReport

_OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "error", "skipped")


def _short(cls: str) -> str:
    return cls.rsplit(".", 1)[-1]


def _outcome(result: TestOutcome) -> str:
    return result.outcome + (f" ({result.reason})" if result.reason else "")


def _group(group: ReasonGroup) -> str:
    mark = "could not run here: " if group.could_not_run else ""
    line = f"  {len(group.test_ids):4d}  {mark}{group.reason}"
    if group.other_reason:
        line += f" ({len(group.other_reason)} fail otherwise with the candidate)"
    return line


def conformance_lines(report: ConformanceReport) -> list[str]:
    """The report as the lines of a short table, with the verdict last."""
    stock, mine = report.stock, report.candidate
    where = f" (release environment {report.release_env})" if report.release_env else ""
    lines = [
        f"vLLM {report.vllm_version}{where}, {' '.join(report.tests)} from {report.tree}",
        f"stock:     {stock.scheduler_class}",
        f"candidate: {mine.scheduler_class}  additional_config "
        f"{json.dumps(report.additional_config, separators=(',', ':'))}",
        f"{'':10}{'stock':>10}{'candidate':>11}",
        *(f"{o:10}{stock.counts.get(o, 0):>10}{mine.counts.get(o, 0):>11}" for o in _OUTCOMES),
        f"{'wall s':10}{stock.wall_s:>10.0f}{mine.wall_s:>11.0f}",
        f"the candidate was built in {report.swapped_tests} tests; "
        f"{sum(f.not_swapped for f in report.schedulers)} built another scheduler (not swapped):",
        *(
            f"  {f.not_swapped:4d}  {f.test_file} ({', '.join(_short(c) for c in f.other_classes)})"
            for f in report.schedulers
            if f.not_swapped
        ),
    ]
    if report.conftest != "loaded":
        lines.append(f"vLLM's tests/conftest.py {report.conftest}")
    if report.hub_stand_ins:
        lines.append(
            f"offline hub: stand-in config of {', '.join(report.hub_stand_ins)}; no other model"
        )
    comparison = report.comparison
    lines.append(f"differences: {len(comparison.differences) or 'none'}")
    lines += [
        f"  {d.test_id}: stock {_outcome(d.stock)} -> candidate {_outcome(d.candidate)}"
        for d in comparison.differences
    ]
    failing = sum(len(g.test_ids) for g in comparison.failing_on_both)
    lines.append(f"fail or error on both: {failing}")
    lines += [_group(g) for g in comparison.failing_on_both]
    if comparison.skipped_on_both:
        skipped = sum(len(g.test_ids) for g in comparison.skipped_on_both)
        lines.append(f"skipped on both: {skipped}")
        lines += [_group(g) for g in comparison.skipped_on_both]
    lines.append(_verdict(report))
    return lines


def _verdict(report: ConformanceReport) -> str:
    compared = report.comparison.passed_on_both + sum(
        len(g.test_ids) for g in report.comparison.failing_on_both
    )
    if report.matches:
        return (
            f"verdict: the candidate matches stock test by test ({compared} tests, "
            f"{report.comparison.passed_on_both} passing on both)"
        )
    if report.swapped_tests == 0:
        return "verdict: nothing compared: no test built the candidate (see the not-swapped list)"
    return (
        f"verdict: the candidate differs from stock in {len(report.comparison.differences)} tests"
    )
