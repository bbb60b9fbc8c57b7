"""Plugin arms have no restore admission: their restore rows read n/a, other log rows count."""

from __future__ import annotations

import json
from pathlib import Path

from reports.ab import load_ab, table_rows
from tests.reports.test_ab_report import KIT, _arm, _sample, _turn


def test_restore_rows_read_na_for_patched_arms_only(tmp_path: Path) -> None:
    (tmp_path / "kit.json").write_text(json.dumps(KIT))
    timeline = [_sample(0, 0.5, 0), _sample(10, 0.9, 1)]
    log = "WARNING restore of r1 waited 61 s (max wait 60 s)\nTraceback (most recent call last):\n"
    for name, spec in (("base", "patched:base"), ("fix", "sim:fix")):
        _arm(tmp_path, name, spec, "duration", 10.0, timeline, [_turn("ok", 300)], log)
    rows = {label: cells for _, label, cells in table_rows(load_ab(tmp_path))}
    assert rows["restores recomputed (log)"] == ["n/a", "1"]
    assert rows["tracebacks (log)"] == ["1", "1"]
