"""Test-by-test comparison of two pytest runs from their JUnit XML, for `kit engine conformance`.

Pure: it reads XML text and returns typed results. Each test (a pytest node id, rebuilt from
the `file` and `classname` attributes of the xunit1 form, else `classname::name`) has one
outcome: passed, failed, error or skipped, or absent when the run did not report it. A test
whose outcome differs between the stock run and the candidate's is a difference; tests that
fail or error on both runs, and tests skipped on both, are grouped by their reason, and a
reason that names something this machine lacks (a model not in the offline hub, a module, a
fixture, a GPU) marks its tests as ones that could not run here.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Outcome = Literal["passed", "failed", "error", "skipped", "absent"]
#: a test reported twice (a teardown error after a failure) keeps its worst outcome
_RANK: dict[Outcome, int] = {"absent": 0, "passed": 1, "skipped": 2, "failed": 3, "error": 4}
_REASON_CHARS = 160
#: a testcase's child element -> its outcome, the worst first
_TAGS: tuple[tuple[str, Outcome], ...] = (
    ("error", "error"),
    ("failure", "failed"),
    ("skipped", "skipped"),
)

#: (pattern over a failure's message and text, reason template, could not run here)
_REASONS: tuple[tuple[re.Pattern[str], str, bool], ...] = (
    (
        re.compile(r"Invalid repository ID or local directory specified: '([^']+)'"),
        "needs the model {0} (not in the offline Hugging Face cache)",
        True,
    ),
    (
        re.compile(
            r"(?:LocalEntryNotFoundError|OfflineModeIsEnabled|outgoing traffic has been disabled)"
        ),
        "needs files from the Hugging Face hub (offline here)",
        True,
    ),
    (re.compile(r"fixture '([^']+)' not found"), "needs the fixture {0} (not loaded here)", True),
    (re.compile(r"No module named '([^']+)'"), "needs the module {0} (not installed)", True),
    (
        re.compile(
            r"(?:Torch not compiled with CUDA|No CUDA GPUs|CUDA driver|requires? (?:a )?GPU|NVIDIA driver)",
            re.I,
        ),
        "needs a GPU",
        True,
    ),
    (re.compile(r"Timeout \(?>?\s*([0-9.]+)\s*s"), "timed out after {0} s", False),
)


class TestOutcome(BaseModel):
    """One test's outcome in one run, and why when it did not pass."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    __test__ = False  # a model, not a pytest test class

    outcome: Outcome = Field(description="passed, failed, error, skipped, or absent from the run")
    reason: str = Field("", description="why it failed, errored or was skipped (one line)")
    could_not_run: bool = Field(
        False, description="the reason names something this machine lacks (model, module, GPU)"
    )


ABSENT = TestOutcome(outcome="absent", reason="not reported by this run")


class Difference(BaseModel):
    """A test whose outcome differs between the stock run and the candidate's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    test_id: str = Field(description="the pytest node id")
    stock: TestOutcome = Field(description="its outcome with the stock scheduler")
    candidate: TestOutcome = Field(description="its outcome with the scheduler under test")


class ReasonGroup(BaseModel):
    """Tests with the same outcome on both runs, grouped by the stock run's reason."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str = Field(description="the stock run's reason (one line)")
    could_not_run: bool = Field(description="the tests could not run on this machine")
    test_ids: tuple[str, ...] = Field(description="the tests, sorted")
    other_reason: tuple[str, ...] = Field(
        (), description="those of them that failed for another reason with the candidate"
    )


class Comparison(BaseModel):
    """Two runs compared test by test."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    differences: tuple[Difference, ...] = Field(description="tests whose outcome differs")
    failing_on_both: tuple[ReasonGroup, ...] = Field(
        description="tests that failed or errored on both runs, by reason (largest first)"
    )
    skipped_on_both: tuple[ReasonGroup, ...] = Field(
        description="tests skipped on both runs, by reason (largest first)"
    )
    passed_on_both: int = Field(description="how many tests passed on both runs")

    @property
    def could_not_run(self) -> tuple[ReasonGroup, ...]:
        """The groups of tests that could not run here (skipped, or failing for a lack)."""
        return tuple(g for g in (*self.failing_on_both, *self.skipped_on_both) if g.could_not_run)


def explain(message: str, text: str = "") -> tuple[str, bool]:
    """A failure's or skip's reason as one line, and whether it names a lack of this machine."""
    whole = f"{message}\n{text}"
    for pattern, template, lack in _REASONS:
        found = pattern.search(whole)
        if found:
            return template.format(*found.groups()), lack
    lines = [line.strip() for line in (message or text).splitlines() if line.strip()]
    first = lines[0] if lines else "no message"
    return first[:_REASON_CHARS], False


def _test_id(case: ET.Element) -> str:
    classname, name = case.get("classname", ""), case.get("name", "")
    path = case.get("file")
    if path and path.endswith(".py"):
        module = path[: -len(".py")].replace("/", ".").replace("\\", ".")
        inner = classname[len(module) + 1 :] if classname.startswith(module + ".") else ""
        return "::".join([path, *(inner.split(".") if inner else []), name])
    return f"{classname}::{name}" if classname else name


def _outcome(case: ET.Element) -> TestOutcome:
    for tag, outcome in _TAGS:
        found = case.find(tag)
        if found is not None:
            reason, lack = explain(found.get("message", ""), found.text or "")
            return TestOutcome(outcome=outcome, reason=reason, could_not_run=lack)
    return TestOutcome(outcome="passed")


def parse_junit(text: str) -> dict[str, TestOutcome]:
    """Test id -> outcome, from a JUnit XML document as pytest writes it."""
    results: dict[str, TestOutcome] = {}
    for case in ET.fromstring(text).iter("testcase"):
        test_id, outcome = _test_id(case), _outcome(case)
        seen = results.get(test_id)
        if seen is None or _RANK[outcome.outcome] > _RANK[seen.outcome]:
            results[test_id] = outcome
    return results


def _groups(
    members: Mapping[str, list[tuple[str, TestOutcome, TestOutcome]]],
) -> tuple[ReasonGroup, ...]:
    groups = [
        ReasonGroup(
            reason=reason,
            could_not_run=any(stock.could_not_run for _, stock, _ in rows),
            test_ids=tuple(sorted(test_id for test_id, _, _ in rows)),
            other_reason=tuple(sorted(t for t, s, c in rows if c.reason != s.reason)),
        )
        for reason, rows in members.items()
    ]
    return tuple(sorted(groups, key=lambda g: (-len(g.test_ids), g.reason)))


def compare(stock: Mapping[str, TestOutcome], candidate: Mapping[str, TestOutcome]) -> Comparison:
    """The candidate's run against the stock run, test by test."""
    differences: list[Difference] = []
    failing: dict[str, list[tuple[str, TestOutcome, TestOutcome]]] = defaultdict(list)
    skipped: dict[str, list[tuple[str, TestOutcome, TestOutcome]]] = defaultdict(list)
    passed = 0
    for test_id in sorted(set(stock) | set(candidate)):
        ours, theirs = stock.get(test_id, ABSENT), candidate.get(test_id, ABSENT)
        if ours.outcome != theirs.outcome:
            differences.append(Difference(test_id=test_id, stock=ours, candidate=theirs))
        elif ours.outcome in ("failed", "error"):
            failing[ours.reason].append((test_id, ours, theirs))
        elif ours.outcome == "skipped":
            skipped[ours.reason].append((test_id, ours, theirs))
        else:
            passed += 1
    return Comparison(
        differences=tuple(differences),
        failing_on_both=_groups(failing),
        skipped_on_both=_groups(skipped),
        passed_on_both=passed,
    )


def counts(results: Mapping[str, TestOutcome]) -> dict[Outcome, int]:
    """How many tests of a run had each outcome (absent excluded)."""
    tally: dict[Outcome, int] = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for result in results.values():
        tally[result.outcome] = tally.get(result.outcome, 0) + 1
    return tally
