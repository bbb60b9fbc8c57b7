"""A run cut short before every planned seed finished: its report says
`interrupted: partial, N of M seeds` in place of the verdict (ab.md, ab.json, ab.html and the
terminal's table), never a p-value or a yes/no, unless asked for over the seeds recorded."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from stallkit.contract.ab import RunPlan
from stallkit.contract.jsonl import read_json, write_json
from stallkit.contract.meta import ArmMeta
from stallkit.reports.ab_figures import load_ab, to_json
from stallkit.reports.ab_html import to_html
from stallkit.reports.ab_markdown import to_markdown
from stallkit.reports.ab_rich import ab_table
from tests.reports.conftest import SeedArmWriter

SLO = {"slo": {"ttft": "4500ms", "warmup": "10s"}}


def _run(root: Path, seed_arm: SeedArmWriter, planned: int, recorded: int) -> Path:
    """`recorded` seeds of each arm, of `planned`; the fix arm's last one interrupted."""
    (root / "kit.json").write_text(json.dumps({"name": "k", **SLO}))
    plan = RunPlan(arms={"base": "sim:base", "fix": "sim:fix"}, seeds=list(range(planned)))
    write_json(root / "plan.json", plan)
    for seed in range(recorded):
        seed_arm(root, "base", seed, 300.0 + 100 * seed)
        seed_arm(root, "fix", seed, None)
    meta_path = root / "fix" / f"seed-{recorded - 1}" / "meta.json"
    write_json(meta_path, read_json(meta_path, ArmMeta).update(end_reason="interrupted"))
    return root


def _terminal(text_of: object) -> str:
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(text_of)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_a_run_cut_short_says_so_in_place_of_the_verdict(
    tmp_path: Path, seed_arm: SeedArmWriter
) -> None:
    report = load_ab(_run(tmp_path, seed_arm, planned=10, recorded=3))
    assert report.verdict is None
    said = "interrupted: partial, 2 of 10 seeds"  # seeds 0 and 1 finished in both arms
    md = to_markdown(report)
    assert f"| verdict |  | {said} |" in md
    assert md.startswith("# A/B: k, interrupted, 2 of 10 seeds finished, virtual clock\n")
    terminal = _terminal(ab_table(report))
    html = to_html(report, tmp_path, [])
    for text in (md, terminal, html):
        assert said in text
        assert "p = " not in text and "not worse than base" not in text
    data = to_json(report)
    assert data["verdict"] is None
    assert data["partial"] == {"seeds_planned": 10, "seeds_finished": 2, "verdict_given": False}


def test_asked_for_over_the_seeds_recorded_the_verdict_is_given_and_labelled(
    tmp_path: Path, seed_arm: SeedArmWriter
) -> None:
    report = load_ab(_run(tmp_path, seed_arm, planned=10, recorded=3), partial=True)
    assert report.verdict is not None and report.verdict.noninferiority
    md = to_markdown(report)
    assert "| verdict |  | fix stalls less often" in md or "| verdict |  | no significant" in md
    assert "and so does the verdict (`kit report --partial`)" in md
    assert to_json(report)["partial"]["verdict_given"] is True


def test_every_seed_finished_is_no_partial_run(tmp_path: Path, seed_arm: SeedArmWriter) -> None:
    root = _run(tmp_path, seed_arm, planned=3, recorded=3)
    meta_path = root / "fix" / "seed-2" / "meta.json"
    write_json(meta_path, read_json(meta_path, ArmMeta).update(end_reason="duration"))
    report = load_ab(root)
    assert report.partial_run is None and report.verdict is not None
    assert "partial" not in to_json(report)
    assert "interrupted" not in to_markdown(report)


def test_a_directory_without_a_plan_is_partial_when_a_seed_was_interrupted(
    tmp_path: Path, seed_arm: SeedArmWriter
) -> None:
    """Directories written before plan.json: the seeds recorded are the plan."""
    root = _run(tmp_path, seed_arm, planned=3, recorded=3)
    (root / "plan.json").unlink()
    report = load_ab(root)
    assert report.partial_run is not None and report.verdict is None
    assert (report.partial_run.seeds_finished, report.partial_run.seeds_planned) == (2, 3)
