"""Trace files: both formats parse into typed lines, and a bad line is one error naming the
file and the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from stallkit.contract.trace import MooncakeLine, SessionCall, TraceError, read_trace, write_trace


def _file(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_mooncake_lines_parse_with_their_line_numbers(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        '{"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [0, 1]}',
        "",
        '{"session_id": "a", "delay": 2000, "text_input": "hello there", "output_length": 5}',
    )
    trace = read_trace(path)
    assert trace.format == "mooncake_trace"
    assert [n for n, _ in trace.mooncake] == [1, 3]
    assert trace.mooncake[0][1].hash_ids == [0, 1]
    assert trace.mooncake[1][1].session_id == "a" and trace.mooncake[1][1].delay == 2000


def test_session_calls_are_told_by_their_first_line(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        '{"session_id": "s", "timestamp": 0, "prompt_tokens": 20000, "completion_tokens": 300}',
        '{"session_id": "s", "delay": 5, "prompt_tokens": 21000, "completion_tokens": 200, '
        '"cached_tokens": 20300}',
    )
    trace = read_trace(path)
    assert trace.format == "sessions" and len(trace) == 2
    assert trace.sessions[1][1].cached_tokens == 20300


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("{not json", "not valid JSON"),
        ('{"timestamp": 1, "delay": 2, "input_length": 5, "output_length": 1}', "not both"),
        ('{"output_length": 3}', "one of input_length, text_input or messages"),
        ('{"input_length": 5, "text_input": "x", "output_length": 1}', "one of input_length"),
        ('{"messages": [{"role": "user", "content": 5}], "output_length": 1}', "text parts"),
        ('{"messages": [{"content": "hi"}], "output_length": 1}', "string role"),
        ('{"input_length": 5, "output_length": 1, "input_lenght": 5}', "unknown key"),
        ('{"input_length": 0, "output_length": 1}', "input_length"),
        ('{"text_input": "x", "hash_ids": [1], "output_length": 1}', "hash_ids need"),
    ],
)
def test_a_bad_line_is_one_error_naming_the_file_and_line(
    tmp_path: Path, line: str, what: str
) -> None:
    good = '{"timestamp": 0, "input_length": 5, "output_length": 1}'
    path = _file(tmp_path, good, good, line)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert caught.value.message.startswith(f"{path}:3: ")
    assert what in caught.value.message


def test_a_session_call_cannot_cache_its_whole_prompt(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        '{"session_id": "s", "prompt_tokens": 100, "completion_tokens": 3, "cached_tokens": 100}',
    )
    with pytest.raises(TraceError, match=r":1: .*cached_tokens \(100\) must be below"):
        read_trace(path)


def test_missing_and_empty_files_are_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="does not exist"):
        read_trace(tmp_path / "nope.jsonl")
    with pytest.raises(TraceError, match="has no lines"):
        read_trace(_file(tmp_path, "", "  "))


def test_written_lines_read_back_the_same(tmp_path: Path) -> None:
    lines = [
        MooncakeLine(session_id="x", timestamp=12, input_length=9, output_length=2, hash_ids=[4]),
        MooncakeLine(session_id="x", delay=3.5, input_length=1, output_length=1),
    ]
    path = tmp_path / "out.jsonl"
    assert write_trace(path, lines) == 2
    assert '"delay"' not in path.read_text().splitlines()[0]  # unset fields are left out
    assert [line for _, line in read_trace(path).mooncake] == lines
    calls = [SessionCall(session_id="s", prompt_tokens=5, completion_tokens=1)]
    write_trace(path, calls)
    assert [call for _, call in read_trace(path).sessions] == calls
