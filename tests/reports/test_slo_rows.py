"""The SLO rows of the A/B report: shown only for a kit with [slo], each seed over the same
window in both arms (up to the first stall of either), the non-inferiority answers in ab.md,
ab.json and the terminal's table (a sentence under the compact one)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from stallkit.reports.ab_figures import load_ab, to_json
from stallkit.reports.ab_markdown import to_markdown
from stallkit.reports.ab_rich import ab_table
from tests.reports.conftest import SeedArmWriter

SLO = {"ttft": "4500ms", "warmup": "10s"}


def _ab_dir(root: Path, seed_arm: SeedArmWriter, kit: dict[str, Any]) -> Path:
    (root / "kit.json").write_text(json.dumps({"name": "k", **kit}))
    for seed in range(3):
        seed_arm(root, "base", seed, 75.0 if seed == 0 else None)
        seed_arm(root, "fix", seed, None)
    return root


def test_a_kit_without_slos_reports_as_before(tmp_path: Path, seed_arm: SeedArmWriter) -> None:
    report = load_ab(_ab_dir(tmp_path, seed_arm, {}))
    assert "SLO" not in to_markdown(report) and "fix is not worse" not in to_markdown(report)
    data = to_json(report)
    assert "noninferiority" not in data["verdict"]
    assert all("slo" not in arm and "slo" not in arm["seeds"][0] for arm in data["arms"].values())


def test_slo_rows_and_answers(tmp_path: Path, seed_arm: SeedArmWriter) -> None:
    kit = {"slo": SLO, "verdict": {"margin": "5%", "figures": ["goodput", "ttft_p99"]}}
    report = load_ab(_ab_dir(tmp_path, seed_arm, kit))
    md = to_markdown(report)
    assert "| SLOs (each seed from its warm-up" in md
    assert "| TTFT ≤ 4.5 s; first 10 s left out |" in md
    # both arms serve each seed alike (no spread in the differences): no p-value, no yes
    said = "| fix is not worse than base by more than 5 % on goodput |  | not enough data ("
    assert said in md and "p = 0;" not in md
    data = to_json(report)
    base, fix = data["arms"]["base"], data["arms"]["fix"]
    # seed 0's base stalled at 75 s: both arms' seed 0 end there; the others run 1000 s
    assert [s["slo"]["window_s"] for s in fix["seeds"]] == [65.0, 990.0, 990.0]
    assert [s["slo"]["window_s"] for s in base["seeds"]] == [65.0, 990.0, 990.0]
    # agents 0-2 start at 0, 50, 100 s with TTFT 2, 3, 4 s: two turns after the warm-up,
    # only one of them ends before seed 0's stall
    assert [s["slo"]["requests"] for s in fix["seeds"]] == [1, 2, 2]
    assert fix["slo"]["objectives"] == {"ttft": "4.5s", "itl": None, "e2e": None, "warmup": "10s"}
    tests = {t["figure"]: t for t in data["verdict"]["noninferiority"]}
    assert tests["goodput"]["answer"] == "inconclusive"
    assert tests["goodput"]["method"] == "paired t over seeds"
    assert tests["goodput"]["p_value"] is None and tests["goodput"]["worse_ci90"] is None
    assert ": not enough data (every seed's difference is the same" in tests["goodput"]["reason"]
    assert tests["ttft_p99"]["worse_pct"] == 0.0


def test_the_compact_table_says_each_answer_under_it(
    tmp_path: Path, seed_arm: SeedArmWriter
) -> None:
    report = load_ab(_ab_dir(tmp_path, seed_arm, {"slo": SLO}))
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(ab_table(report))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80
    flat = " ".join(out.split())
    for figure in ("goodput", "TTFT p99", "throughput"):  # the default figures
        assert f"fix is not worse than base by more than 5 % on {figure}: " in flat


def test_the_compact_table_keeps_each_estimate_on_one_line(
    tmp_path: Path, seed_arm: SeedArmWriter
) -> None:
    report = load_ab(_ab_dir(tmp_path, seed_arm, {"slo": {**SLO, "itl": "50ms"}}))
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(ab_table(report))
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    for label in ("SLO attainment", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99"):
        [line] = [x for x in lines if x.startswith(label)]
        # both arms' cells on the label's line, the unit said once per cell
        assert line.count("(") == 2 and line.count(" - ") == 0, line
