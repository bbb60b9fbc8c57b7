"""After a Ctrl-C, a seed whose end was never recorded is reported as interrupted."""

from __future__ import annotations

from pathlib import Path

from stallkit.contract.jsonl import read_json, write_json
from stallkit.contract.meta import ArmMeta
from stallkit.kits.ab.execute import mark_interrupted
from stallkit.reports.ab_figures import load_ab
from stallkit.reports.ab_markdown import to_markdown
from tests.reports.conftest import write_seed_arm


def test_a_seed_left_starting_by_a_ctrl_c_reads_interrupted(tmp_path: Path) -> None:
    (tmp_path / "kit.json").write_text('{"name": "k"}')
    for seed in (1, 2):
        write_seed_arm(tmp_path, "base", seed, 400.0)
        write_seed_arm(tmp_path, "fix", seed, None)
    # the fix arm's second seed was running in a worker that stopped before writing its end
    meta_path = tmp_path / "fix" / "seed-2" / "meta.json"
    write_json(meta_path, read_json(meta_path, ArmMeta).update(end_reason="starting"))
    mark_interrupted(tmp_path)
    assert read_json(meta_path, ArmMeta).end_reason == "interrupted"
    assert read_json(tmp_path / "fix" / "seed-1" / "meta.json", ArmMeta).end_reason == "duration"
    md = to_markdown(load_ab(tmp_path))
    assert "(1 censored: 1 interrupted)" in md and "never" not in md
