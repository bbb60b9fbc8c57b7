"""What a verdict may be made of: identical seeds count once, damaged seeds are named.

Saved seed directories as `kit ab` writes them; the report is read back from disk.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stallkit.kits.cli import app
from stallkit.reports.ab_figures import load_ab, to_json
from stallkit.reports.ab_markdown import to_markdown
from stallkit.reports.errors import DamagedRunError


def _repeat(root: Path, arm: str, src_seed: int, seed: int) -> None:
    """`arm`'s seed `seed` as an exact repeat of `src_seed`'s run (a seed-free workload)."""
    src, dst = root / arm / f"seed-{src_seed}", root / arm / f"seed-{seed}"
    shutil.copytree(src, dst)
    meta = json.loads((dst / "meta.json").read_text())
    (dst / "meta.json").write_text(json.dumps(meta | {"seed": seed}))


def _ab(root: Path, seed_arm: Any, seeds: range, base_onset: float | None = 400.0) -> None:
    (root / "kit.json").write_text(json.dumps({"name": "k"}))
    for seed in seeds:
        seed_arm(root, "base", seed, base_onset)
        seed_arm(root, "fix", seed, None)


def test_seeds_whose_runs_are_identical_count_once(tmp_path: Path, seed_arm: Any) -> None:
    _ab(tmp_path, seed_arm, range(1))
    for seed in range(1, 10):
        _repeat(tmp_path, "base", 0, seed)
        _repeat(tmp_path, "fix", 0, seed)
    report = load_ab(tmp_path)
    v = report.verdict
    assert v is not None
    assert (v.seeds, v.base_runs, v.fix_runs) == (10, 1, 1)
    assert (v.base_stalled, v.fix_stalled) == (1, 0)
    # one run's exposure, not ten: base until its onset, fix its whole length
    assert (v.base_exposure_s, v.fix_exposure_s) == (400.0, 1000.0)
    assert v.conclusion == "inconclusive"  # one fix run cannot show a rate below base's
    rows = report.seeds["base"]
    assert [r.same_as for r in rows] == [None] + [0] * 9
    md = to_markdown(report)
    assert "| stalled seeds | 1 of 1 distinct (10 seeds) | 0 of 1 distinct (10 seeds) |" in md
    assert "base: 10 seeds, 1 distinct run" in md
    assert "| base | 3 | yes | spinning | 400.0 | yes |" in md and "| seed 0 |" in md
    assert to_json(report)["arms"]["fix"]["rate"]["runs"] == 1


def test_distinct_seeds_are_all_observations(tmp_path: Path, seed_arm: Any) -> None:
    _ab(tmp_path, seed_arm, range(4))
    v = load_ab(tmp_path).verdict
    assert v is not None and (v.base_runs, v.fix_runs, v.base_exposure_s) == (4, 4, 1600.0)
    assert "distinct" not in to_markdown(load_ab(tmp_path))


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda d: (d / "meta.json").unlink(), "base/seed-2/meta.json: missing"),
        (lambda d: (d / "meta.json").write_text("{"), "base/seed-2/meta.json: not valid JSON"),
        (
            lambda d: (d / "turns.jsonl").write_text("[]\n{}\n"),
            "base/seed-2/turns.jsonl: line 1",
        ),
        (lambda d: (d / "meta.json").write_bytes(b"\xff\xfe"), "base/seed-2/meta.json"),
    ],
)
def test_a_damaged_seed_is_named_and_no_verdict_is_given_without_it(
    tmp_path: Path, seed_arm: Any, damage: Any, named: str
) -> None:
    _ab(tmp_path, seed_arm, range(4))
    whole = load_ab(tmp_path).verdict
    damage(tmp_path / "base" / "seed-2")
    with pytest.raises(DamagedRunError, match="1 seed\\(s\\) could not be read") as err:
        load_ab(tmp_path)
    assert named in err.value.message and "--partial" in err.value.hint
    done = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert done.exit_code == 1, done.output
    assert named in done.output and "Traceback" not in done.output
    assert not (tmp_path / "ab.md").exists()  # no verdict over a silently smaller set
    # --partial: the readable seeds, the damaged one listed in every report
    partial = CliRunner().invoke(app, ["report", str(tmp_path), "--partial"])
    assert partial.exit_code == 0, partial.output
    md = (tmp_path / "ab.md").read_text()
    assert "Left out, could not be read (1): " + named in md
    data = json.loads((tmp_path / "ab.json").read_text())
    assert [(d["arm"], d["seed"]) for d in data["damaged"]] == [("base", 2)]
    assert data["verdict"]["base_exposure_s"] == 1200.0 != (whole and whole.base_exposure_s)
    assert named in (tmp_path / "ab.html").read_text()


def test_a_one_seed_arm_without_its_meta_is_named_not_skipped(
    tmp_path: Path, seed_arm: Any
) -> None:
    # one seed: each arm's files sit in the arm's own directory
    (tmp_path / "kit.json").write_text(json.dumps({"name": "k"}))
    for arm in ("base", "fix"):
        d = seed_arm(tmp_path, arm, 1, None)
        for f in d.iterdir():
            f.rename(tmp_path / arm / f.name)
        d.rmdir()
    assert set(load_ab(tmp_path).arms) == {"base", "fix"}
    (tmp_path / "base" / "meta.json").unlink()
    with pytest.raises(DamagedRunError, match=r"base/meta\.json: missing"):
        load_ab(tmp_path)


def test_per_seed_like_for_like_is_the_tables_rule(tmp_path: Path, seed_arm: Any) -> None:
    _ab(tmp_path, seed_arm, range(2))
    report = load_ab(tmp_path)
    # base stopped at its stall in every seed: flagged in the table, "no" in every seed row
    assert all(not r.like_for_like for r in report.seeds["base"])
    assert all(r.like_for_like for r in report.seeds["fix"])
    md = to_markdown(report)
    assert "| base | 0 | yes | spinning | 400.0 | yes |" in md
    base_rows = [ln for ln in md.splitlines() if ln.startswith("| base | ")]
    assert all(ln.split(" | ")[11] == "no" for ln in base_rows)


def test_seeds_that_observed_nothing_are_not_one_run(tmp_path: Path, seed_arm: Any) -> None:
    # two wall-clock seeds that ended before any scrape: nothing says their runs were the same
    _ab(tmp_path, seed_arm, range(2))
    for seed in range(2):
        d = tmp_path / "fix" / f"seed-{seed}"
        (d / "timeline.jsonl").write_text("")
        (d / "turns.jsonl").write_text("")
        meta = json.loads((d / "meta.json").read_text())
        end = "engine_died" if seed else "error"
        (d / "meta.json").write_text(json.dumps(meta | {"end_reason": end, "engine_s": 3.0}))
    rows = load_ab(tmp_path).seeds["fix"]
    assert [r.same_as for r in rows] == [None, None]
    assert {r.censored for r in rows} == {"error", "engine_died"}


def test_mark_repeats_keys_on_the_digest_not_on_a_seed() -> None:
    from stallkit.contract.ab import SeedRow
    from stallkit.reports.seed_stats import distinct, mark_repeats

    def row(seed: int | None, digest: str | None) -> SeedRow:
        return SeedRow(
            seed=seed, stalled=False, kind=None, onset_s=None, stopped_run=False, turns=1,
            preemptions=None, restores_recomputed=None, decode_tok_s=None, duration_s=10.0,
            clock="virtual", like_for_like=True, end_reason="duration", exposure_s=10.0,
            censored=None, run_digest=digest,
        )  # fmt: skip

    rows = mark_repeats([row(1, "a"), row(2, "b"), row(3, "a"), row(4, None), row(5, None)])
    assert [r.same_as for r in rows] == [None, None, 1, None, None]
    assert [r.seed for r in distinct(rows)] == [1, 2, 4, 5]
