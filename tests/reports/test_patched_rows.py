"""Arms without restore admission (the plugin, locally or inside an image) read n/a for their
restore rows, decided by the capabilities meta.json records, not by the spec's text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stallkit.contract.meta import EngineCapabilities
from stallkit.reports.ab_figures import load_ab
from stallkit.reports.ab_markdown import table_rows
from tests.reports.test_ab_report import KIT, _arm, _sample, _turn

LOG = "WARNING restore of r1 waited 61 s (max wait 60 s)\nTraceback (most recent call last):\n"
PLUGIN = EngineCapabilities(step_counter=True, restore_admission=False)


def _rows(root: Path, arms: dict[str, tuple[str, EngineCapabilities | None]]) -> dict[str, Any]:
    (root / "kit.json").write_text(json.dumps(KIT))
    timeline = [_sample(0, 0.5, 0), _sample(10, 0.9, 1)]
    for name, (spec, caps) in arms.items():
        _arm(root, name, spec, "duration", 10.0, timeline, [_turn("ok", 300)], LOG)
        if caps is not None:
            meta_path = root / name / "meta.json"
            meta = json.loads(meta_path.read_text())
            meta["capabilities"] = caps.model_dump()
            meta_path.write_text(json.dumps(meta))
    return {label: cells for _, label, cells in table_rows(load_ab(root))}


def test_restore_rows_read_na_for_plugin_arms_only(tmp_path: Path) -> None:
    rows = _rows(tmp_path, {"base": ("patched:base", PLUGIN), "fix": ("sim:fix", None)})
    assert rows["restores recomputed (log)"] == ["n/a", "1"]
    assert rows["tracebacks (log)"] == ["1", "1"]


def test_a_docker_image_running_the_plugin_reads_na_for_restores(tmp_path: Path) -> None:
    image = "vllm/vllm-openai:v0.32.0"
    rows = _rows(tmp_path, {"base": (image, PLUGIN), "fix": (image, PLUGIN)})
    assert rows["restores recomputed (log)"] == ["n/a", "n/a"]
    assert rows["tracebacks (log)"] == ["1", "1"]
    assert load_ab(tmp_path).arms["base"].capabilities == PLUGIN  # ab.json carries them too


def test_an_image_of_the_fork_counts_its_restores(tmp_path: Path) -> None:
    caps = EngineCapabilities(gpu=True)
    rows = _rows(tmp_path, {"base": ("fork/base:1", caps), "fix": ("fork/fix:1", None)})
    assert rows["restores recomputed (log)"] == ["1", "1"]
