"""The one JSONL writer and reader, and JSON files: flushed lines, a torn last line skipped, a
bad line anywhere else a one-line error naming the file and the line (also through `kit
report`, exit 2 without a traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stallkit.contract.errors import RunFileError, StallkitError
from stallkit.contract.jsonl import JsonlWriter, append_jsonl, read_json, read_jsonl, write_json
from stallkit.contract.meta import ArmMeta
from stallkit.contract.records import TurnRecord, read_records
from stallkit.contract.timeline import GpuLine, SampleLine, StallStartedLine, timeline_adapter
from stallkit.kits.cli import app


def _record(agent: int) -> TurnRecord:
    return TurnRecord(
        agent=agent, session=0, turn=0, attempt=0, t_start=1.0, t_end=2.5, ttft_s=0.5,
        chunks=[(0.5, 3), (1.5, 4)], expected_prompt_tokens=10, prompt_tokens=10,
        completion_tokens=7, cached_tokens=0, max_tokens=7, outcome="ok", error=None, status=200,
    )  # fmt: skip


def _turns(path: Path, count: int) -> list[TurnRecord]:
    records = [_record(i) for i in range(count)]
    with JsonlWriter(path) as writer:
        for record in records:
            writer.write(record)
    return records


def test_each_line_is_flushed_as_written_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "turns.jsonl"
    with JsonlWriter(path) as writer:
        writer.write(_record(0))
        assert len(path.read_text().splitlines()) == 1  # readable before close
        writer.write({"plain": "dict"})
        assert json.loads(path.read_text().splitlines()[1]) == {"plain": "dict"}
    writer.write(_record(9))  # after close: dropped, not an error (the run is ending)
    append_jsonl(path, _record(1))
    assert len(path.read_text().splitlines()) == 3


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    records = _turns(path, 3)
    whole = path.read_text()
    # the process died while writing a fourth line
    path.write_text(whole + _record(3).model_dump_json()[:40])
    assert read_records(path) == records
    assert read_records(tmp_path) == records  # a directory means its turns.jsonl
    path.write_text(whole + "\n\n")  # blank lines are nothing
    assert read_records(path) == records


@pytest.mark.parametrize(
    ("bad", "what"),
    [
        ('{"agent": 1, "sess', "not valid JSON"),
        ('{"agent": "x"}', "agent"),
        ("[1, 2]", "Input should be an object"),
    ],
)
def test_a_bad_middle_line_names_the_file_and_line(tmp_path: Path, bad: str, what: str) -> None:
    path = tmp_path / "turns.jsonl"
    _turns(path, 3)
    lines = path.read_text().splitlines()
    lines.insert(1, bad)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RunFileError) as info:
        read_records(path)
    message = info.value.message
    assert message.startswith(f"{path}:2: ") and what in message and "\n" not in message
    assert info.value.hint and isinstance(info.value, StallkitError)


def test_a_whole_last_line_of_the_wrong_shape_is_an_error_not_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    path.write_text('{"type": "gpu", "t": 1.0, "util": {"0": 5.0}}\n{"type": "nosuch", "t": 2}\n')
    with pytest.raises(RunFileError, match=r"timeline\.jsonl:2: "):
        read_jsonl(path, timeline_adapter)


def test_timeline_lines_are_told_apart_by_type(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    written = [
        GpuLine(t=0.0, util={"0": 12.5}),
        SampleLine(t=0.0, running=2, waiting=1, kv_usage=0.5, gen_tok_s=3.0),
        StallStartedLine(t=70.0, onset=10.0, kind="frozen", gpu_checked=True),
    ]
    with JsonlWriter(path) as writer:
        for line in written:
            writer.write(line)
    assert read_jsonl(path, timeline_adapter) == written
    assert "engines" not in json.loads(path.read_text().splitlines()[1])  # absent, not null


def test_missing_files(tmp_path: Path) -> None:
    assert read_jsonl(tmp_path / "none.jsonl", timeline_adapter, missing_ok=True) == []
    with pytest.raises(RunFileError, match=r"none\.jsonl is missing"):
        read_jsonl(tmp_path / "none.jsonl", timeline_adapter)
    with pytest.raises(RunFileError, match=r"meta\.json is missing"):
        read_json(tmp_path / "meta.json", ArmMeta)


def test_json_files_are_written_whole_and_read_back_or_named_when_bad(tmp_path: Path) -> None:
    meta = ArmMeta.starting(
        arm="base", spec="sim:base", kind="sim", clock="virtual", seed=1, time_scale=1.0,
        planned_duration_s=600.0, started_at="2026-12-01T10:00:00+00:00",
    )  # fmt: skip
    path = tmp_path / "meta.json"
    write_json(path, meta)
    assert read_json(path, ArmMeta) == meta
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]  # no temporary left behind
    ended = meta.update(end_reason="duration", wall_s=600.0)
    assert (ended.end_reason, ended.started_at) == ("duration", meta.started_at)
    with pytest.raises(ValueError, match="end_reason"):
        meta.update(end_reason="sometime")  # validated again
    path.write_text('{"arm": "base"')
    with pytest.raises(RunFileError, match="is not valid JSON"):
        read_json(path, ArmMeta)
    path.write_text(json.dumps(meta.model_dump() | {"surprise": 1}))
    with pytest.raises(RunFileError, match=r"meta\.json: surprise: unknown key"):
        read_json(path, ArmMeta)


def test_kit_report_on_a_corrupt_timeline_is_one_line_and_exit_1(tmp_path: Path) -> None:
    arm = tmp_path / "run"
    arm.mkdir()
    meta = ArmMeta(arm="run", spec="sim:fix", kind="sim", end_reason="duration", wall_s=10.0)
    write_json(arm / "meta.json", meta)
    (arm / "kit.json").write_text('{"name": "k"}')
    (arm / "timeline.jsonl").write_text(
        '{"type": "gpu", "t": 1}\n{"type": "gpu", "t": 2, "util": {}}\n'
    )
    result = CliRunner().invoke(app, ["report", str(arm)])
    # a damaged run (its data, not the command line): exit 1, the file and the line named
    assert result.exit_code == 1, result.output
    assert "timeline.jsonl: line 1: gpu.util: Field required" in result.output
    assert "Traceback" not in result.output
