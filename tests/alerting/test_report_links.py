"""The A/B report links each stall to its forensics bundle and quotes its top frames, read
from the saved run directory only; a torn manifest is skipped."""

from __future__ import annotations

import json
from pathlib import Path

from stallkit.reports.ab_figures import load_ab
from stallkit.reports.ab_markdown import to_markdown


def _arm(root: Path, name: str, bundles: dict[str, dict[str, object]]) -> None:
    arm = root / name
    arm.mkdir(parents=True)
    meta = {"arm": name, "spec": f"sim:{name}", "time_scale": 30.0, "wall_s": 10.0}
    (arm / "meta.json").write_text(json.dumps(meta | {"end_reason": "duration"}))
    (arm / "kit.json").write_text("{}")
    lines = [{"type": "stall_started", "t": 3.0, "onset": 1.0, "kind": "spinning"}]
    (arm / "timeline.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    for dirname, manifest in bundles.items():
        (arm / "forensics" / dirname).mkdir(parents=True)
        (arm / "forensics" / dirname / "manifest.json").write_text(json.dumps(manifest))


def test_ab_report_links_each_stall_to_its_bundle_with_top_frames(tmp_path: Path) -> None:
    (tmp_path / "kit.json").write_text('{"name": "k"}')
    frames = ["Scheduler._running_pass (engine/sim/scheduler.py:210)", "Scheduler._step (x:1)"]
    manifest = {"onset": 1.0, "kind": "spinning", "top_frames": frames, "errors": []}
    manifest["hot_leaves"] = ["Scheduler._step (engine/sim/scheduler.py) 61%", "send (h.py) 9%"]
    _arm(tmp_path, "base", {"0000001000ms": manifest, "0000009000ms": {"onset": "torn"}})
    _arm(tmp_path, "fix", {})
    report = load_ab(tmp_path)
    (link,) = report.arms["base"].forensics
    assert link.path == "forensics/0000001000ms" and link.onset_s == 30.0
    assert report.arms["fix"].forensics == []
    md = to_markdown(report)
    assert "## Stall forensics" in md
    line = next(x for x in md.splitlines() if "forensics/0000001000ms" in x)
    assert "[base/forensics/0000001000ms](base/forensics/0000001000ms/)" in line
    assert "spinning stall at 30 s" in line
    assert "`Scheduler._step (engine/sim/scheduler.py) 61%`; `send (h.py) 9%`" in line
