"""The A/B table in a terminal: the wide layout at 200 columns, the compact one at 80."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from stallkit.contract.ab import StallRate
from stallkit.reports.ab_figures import load_ab
from stallkit.reports.ab_markdown import rate_cell, to_markdown
from stallkit.reports.ab_rich import ab_table
from tests.reports.conftest import SeedArmWriter


def _lines(report_dir: Path, width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(ab_table(load_ab(report_dir)))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return [line.rstrip() for line in out.splitlines()]


def _ab_dir(root: Path, seed_arm: SeedArmWriter, seeds: int = 10) -> Path:
    (root / "kit.json").write_text(json.dumps({"name": "restore-stall"}))
    for seed in range(seeds):
        seed_arm(root, "base", seed, 300.0 + 40 * seed)
        fix = seed_arm(root, "fix", seed, None)
        with (fix / "timeline.jsonl").open("a") as timeline:  # each seed its own run
            timeline.write(json.dumps({"type": "sample", "t": 999.0, "running": seed}) + "\n")
    return root


def test_compact_at_80_columns_is_no_wider_and_hardly_longer(
    tmp_path: Path, seed_arm: SeedArmWriter
) -> None:
    ab = _ab_dir(tmp_path, seed_arm)
    markdown = to_markdown(load_ab(ab))
    narrow, wide = _lines(ab, 80), _lines(ab, 200)
    assert max(len(line) for line in narrow) <= 80
    assert len(narrow) <= len(wide) * 4 / 3, "\n".join(narrow)
    # the compact layout: short cells, the verdict as a line under the table
    report = load_ab(ab)
    assert rate_cell(report.rates["base"], short=True) in "\n".join(narrow)
    assert rate_cell(report.rates["fix"], short=True) in "\n".join(narrow)
    assert any(
        line.startswith("stalls, longest") and "10 spinning, 600 s" in line for line in narrow
    )
    assert any(line.startswith("verdict: fix stalls less often: p = ") for line in narrow)
    assert not any("stalls per engine hour of exposure" in line for line in narrow)
    # the wide layout keeps the markdown's rows, the verdict in the fix arm's column
    wide_text = "\n".join(wide)
    assert "stalls per engine hour of exposure" in wide_text
    assert not any(line.startswith("verdict:") for line in wide)
    assert to_markdown(load_ab(ab)) == markdown  # the view leaves the report as it was


def test_one_arm_run_fits_80_columns(tmp_path: Path, seed_arm: SeedArmWriter) -> None:
    (tmp_path / "kit.json").write_text(json.dumps({"name": "restore-stall"}))
    run = seed_arm(tmp_path, "run", 7, 500.0)
    narrow = _lines(run, 80)
    assert max(len(line) for line in narrow) <= 80
    assert narrow[0].startswith("run: k, 1 seed, virtual clock")
    assert not any(line.startswith("verdict") for line in narrow)
    assert len(narrow) <= len(_lines(run, 200)) * 4 / 3


def test_short_rate_cells() -> None:
    def rate(stalls: int, hours: float, ci95: tuple[float, float] | None) -> StallRate:
        per_h = None if ci95 is None else stalls / hours
        return StallRate(
            stalls=stalls, exposure_s=hours * 3600, censored=0, stall_rate_per_h=per_h, ci95=ci95
        )

    assert rate_cell(rate(10, 6.5, (0.74, 2.83)), short=True) == "10 in 6.5 h: 1.5/h (0.74-2.8)"
    assert rate_cell(rate(0, 15.0, (0.0, 0.1997)), short=True) == "0 in 15.0 h: \u2264 0.2/h"
    assert rate_cell(rate(0, 0.0, None), short=True) == "0 in 0.0 h (never under load)"
