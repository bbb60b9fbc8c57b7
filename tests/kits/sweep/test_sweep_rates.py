"""A load sweep (`kit sweep --vary load.rate=...`): the rate map in sweep.json and sweep.html,
and sweep directories from before it (runs without arrival figures) still read and resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stallkit.contract.sweep import SweepFile
from stallkit.kits.cli import app
from stallkit.reports import write_sweep_reports

ARGS = ["--vary", "load.rate=0.1,0.4", "--seeds", "1", "--duration", "900"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rates") / "s"
    args = ["sweep", *ARGS, "--out", str(out), "--no-dashboard", "--workers", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (out.parent / "output.txt").write_text(result.output)  # beside the sweep, not in it
    return out


def test_a_rate_sweep_maps_what_each_arm_did_against_the_offered_rate(swept: Path) -> None:
    content = SweepFile.model_validate_json((swept / "sweep.json").read_text())
    assert content.rate_map is not None
    series = {s.arm: s for s in content.rate_map.series}
    assert set(series) == {"base", "fix"}
    for one in series.values():
        low, high = one.points
        assert (low.offered_rps, high.offered_rps) == (0.1, 0.4) and one.unit == "requests"
        assert low.achieved_rps is not None and high.achieved_rps is not None
        # the restore-stall engine serves about 0.2 long requests a second: it keeps up with
        # 0.1 and falls behind 0.4, where requests wait for a free agent
        assert low.achieved_rps > 0.9 * 0.1 and high.achieved_rps < 0.9 * 0.4
        assert one.keeps_up_rps == 0.1
        # the README kit sets [slo]: every run's goodput and attainment after its warm-up
        assert low.goodput_rps is not None and low.attainment_pct is not None
        assert low.goodput_rps <= low.achieved_rps and high.goodput_rps is not None
        assert high.lag_p99_s is not None and low.lag_p99_s is not None
        assert high.lag_p99_s > 10 * max(low.lag_p99_s, 1.0)
    runs = [json.loads(line) for line in (swept / "sweep-runs.jsonl").read_text().splitlines()]
    assert {r["offered_rps"] for r in runs} == {0.1, 0.4}
    html = (swept / "sweep.html").read_text()
    assert "<h2>Rate map</h2>" in html and html.count("<svg") == 2 and "keeps up" in html
    assert "stroke-dasharray" in html and "<script" not in html  # the y = x line, no script


def test_the_terminal_says_where_each_arm_keeps_up(swept: Path) -> None:
    said = " ".join((swept.parent / "output.txt").read_text().split())
    for arm in ("base", "fix"):
        assert f"{arm} against the rate: keeps up (" in said or (
            f"{arm} against the rate: falls behind" in said
        )
    assert said.count("meets the SLOs") + said.count("misses the SLOs") == 2


def test_runs_recorded_before_the_rate_map_still_read_and_map_nothing(
    swept: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "s"
    shutil.copytree(swept, copy)
    runs = [json.loads(line) for line in (copy / "sweep-runs.jsonl").read_text().splitlines()]
    old = [{k: v for k, v in r.items() if k not in {"offered_rps", "arrival_unit", "lag_p99_s"}}
           for r in runs]  # fmt: skip
    (copy / "sweep-runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    content = write_sweep_reports(copy)
    assert content.rate_map is None and content.runs == 4
    assert "rate_map" not in json.loads((copy / "sweep.json").read_text())
    assert "Rate map" not in (copy / "sweep.html").read_text()
