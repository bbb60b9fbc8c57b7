"""The A/B reports made from saved run directories: figures, flags, markdown, JSON, PNG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stallkit.contract.timeline import SampleLine, StallStartedLine, TimelineLine
from stallkit.reports.ab_figures import load_ab, to_json
from stallkit.reports.ab_markdown import FLAG, to_markdown
from stallkit.reports.errors import ReportError
from stallkit.reports.rundir import counter_increase, stalls_from_timeline
from stallkit.reports.write import write_reports

KIT = {
    "name": "restore-stall",
    "report": {
        "log_patterns": {
            "restores_recomputed": "(?i)restore.*max[ _-]?wait",
            "tracebacks": r"Traceback \(most recent call last\)",
        }
    },
}


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _turn(outcome: str, completion: int, prompt: int = 1000, cached: int = 500) -> dict[str, Any]:
    return {
        "agent": 0,
        "session": 0,
        "turn": 0,
        "attempt": 0,
        "t_start": 0.0,
        "t_end": 1.0,
        "ttft_s": 0.1,
        "chunks": [],
        "expected_prompt_tokens": prompt,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": cached,
        "max_tokens": completion,
        "outcome": outcome,
        "error": None,
        "status": 200,
    }


def _sample(t: float, kv: float, preempt: float, gen_tok_s: float = 10.0) -> dict[str, Any]:
    return {
        "type": "sample",
        "t": t,
        "running": 4,
        "waiting": 6,
        "kv_usage": kv,
        "gen_tokens": 0.0,
        "gen_tok_s": gen_tok_s,
        "preemptions": preempt,
    }


def _arm(
    root: Path,
    name: str,
    spec: str,
    end: str,
    wall_s: float,
    timeline: list[dict[str, Any]],
    turns: list[dict[str, Any]],
    log: str,
) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "kit.json").write_text(json.dumps(KIT))
    (d / "meta.json").write_text(
        json.dumps(
            {
                "arm": name,
                "spec": spec,
                "time_scale": 10.0,
                "wall_s": wall_s,
                "end_reason": end,
                "stopped_by_monitor": end == "stall_stop",
                "planned_duration_s": 1800.0,
            }
        )
    )
    _write(d / "timeline.jsonl", timeline)
    _write(d / "turns.jsonl", turns)
    (d / "engine.log").write_text(log)


@pytest.fixture
def ab_dir(tmp_path: Path) -> Path:
    (tmp_path / "kit.json").write_text(json.dumps(KIT))
    base_tl = [
        _sample(0, 0.5, 0),
        _sample(10, 0.98, 3),
        _sample(20, 0.98, 3, 0.0),
        {"type": "gpu", "t": 20, "util": {"0": 0.0, "1": 0.0}},
        {"type": "stall_started", "t": 26, "onset": 20, "kind": "spinning", "gpu_checked": True},
        {"type": "stop_requested", "t": 44, "onset": 20, "stall_s": 24},
        _sample(44.5, 0.98, 3, 0.0),
    ]
    _arm(
        tmp_path,
        "base",
        "sim:base",
        "stall_stop",
        45.0,
        base_tl,
        [_turn("ok", 300), _turn("timeout", 0), _turn("aborted", 0)],
        "WARNING restore of r1 waited 61 s (max wait 60 s)\n",
    )
    fix_tl = [_sample(0, 0.4, 0), _sample(90, 0.9, 2), _sample(180, 0.95, 7)]
    log = "".join(f"WARNING restore of r{i} waited 61 s (max wait 60 s)\n" for i in range(5))
    _arm(
        tmp_path,
        "fix",
        "sim:fix",
        "duration",
        180.0,
        fix_tl,
        [_turn("ok", 300)] * 4 + [_turn("http_error", 0)],
        log + "Traceback (most recent call last):\n",
    )
    return tmp_path


def test_figures_per_arm(ab_dir: Path) -> None:
    report = load_ab(ab_dir)
    base, fix = report.arms["base"], report.arms["fix"]
    assert [(s.start_s, s.duration_s, s.kind, s.stopped_run) for s in base.stalls] == [
        (200.0, 245.0, "spinning", True)
    ]
    assert (base.turns, base.errors, base.timeouts, base.aborted) == (1, 0, 1, 1)
    assert (fix.turns, fix.errors, fix.timeouts) == (4, 1, 0)
    assert base.max_kv_perc == 98.0 and fix.max_kv_perc == 95.0
    assert base.preemptions == 3 and fix.preemptions == 7
    assert base.log_counts == {"restores_recomputed": 1, "tracebacks": 0}
    assert fix.log_counts == {"restores_recomputed": 5, "tracebacks": 1}
    assert fix.duration_s == 1800.0 and base.duration_s == 450.0
    assert fix.decode_tok_s == round(1200 / 1800, 1)
    assert fix.cached_perc == 50.0
    assert fix.stalls == []


def test_markdown_flags_the_arm_that_stopped_early(ab_dir: Path) -> None:
    md = to_markdown(load_ab(ab_dir))
    for row in (
        "stalls",
        "turns / errors / timeouts",
        "max KV usage",
        "preemptions",
        "restores recomputed (log)",
        "tracebacks (log)",
        "decode tok/s",
        "prompt tokens from cache",
        "run length",
    ):
        assert f"| {row}" in md, row
    decode = next(line for line in md.splitlines() if line.startswith("| decode tok/s"))
    base_cell, fix_cell = decode.split("|")[2:4]
    assert FLAG in base_cell and FLAG not in fix_cell
    assert "stopped by the monitor" in md
    assert "run stopped by monitor" in md


def test_json_shape(ab_dir: Path) -> None:
    data = to_json(load_ab(ab_dir))
    assert data["kit"] == "restore-stall"
    for arm in ("base", "fix"):
        for key in (
            "spec",
            "stalls",
            "turns",
            "errors",
            "timeouts",
            "max_kv_perc",
            "preemptions",
            "log_counts",
            "decode_tok_s",
            "cached_perc",
            "duration_s",
        ):
            assert key in data["arms"][arm], key
    json.dumps(data)


def test_write_reports_makes_three_files(ab_dir: Path) -> None:
    write_reports(ab_dir)
    assert (ab_dir / "ab.md").read_text().startswith("# A/B: restore-stall")
    assert json.loads((ab_dir / "ab.json").read_text())["arms"]["base"]["stalls"]
    assert (ab_dir / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_directory_is_a_report_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="not a directory"):
        load_ab(tmp_path / "nope")
    (tmp_path / "kit.json").write_text("{}")
    with pytest.raises(ReportError, match="no arm directories"):
        load_ab(tmp_path)


def test_counter_increase_survives_a_reset() -> None:
    assert counter_increase([None, 5, 8, 2, 4]) == 3 + 2 + 2
    assert counter_increase([None, None]) is None


def test_open_stall_lasts_until_the_last_event() -> None:
    events: list[TimelineLine] = [
        StallStartedLine(t=5, onset=2, kind="frozen"),
        SampleLine(t=9),
    ]
    (stall,) = stalls_from_timeline(events, scale=2.0)
    assert (stall.start_s, stall.duration_s, stall.stopped_run) == (4.0, 14.0, False)


def test_the_scale_note_names_arms_converted_with_the_nominal_scale(ab_dir: Path) -> None:
    # these arms' meta.json have no measured scale: their times use the nominal 10x
    report = load_ab(ab_dir)
    assert {arm.scale_basis for arm in report.arms.values()} == {"nominal"}
    note = next(n for n in to_markdown(report).splitlines() if n.startswith("Times are engine"))
    assert "they measured" in note and "base, fix: its engine clock could not be read" in note
    assert to_json(report)["arms"]["base"]["scale_basis"] == "nominal"
