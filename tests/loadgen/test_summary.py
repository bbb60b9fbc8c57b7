"""Summaries and records: pure figures from hand-made records, and the JSONL round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stallkit.contract.summary import percentiles, summarize
from stallkit.loadgen.records import RecordWriter, TurnRecord, read_records


def _record(**fields: Any) -> TurnRecord:
    base: dict[str, Any] = {
        "agent": 0, "session": 0, "turn": 0, "attempt": 0, "t_start": 0.0, "t_end": 4.0,
        "ttft_s": 1.0, "chunks": [(1.0, 1), (2.0, 2), (4.0, 2)], "expected_prompt_tokens": 100,
        "prompt_tokens": 100, "completion_tokens": 5, "cached_tokens": 60, "max_tokens": 5,
        "outcome": "ok", "error": None, "status": 200,
    }  # fmt: skip
    return TurnRecord.model_validate({**base, **fields})


def test_summary_counts_latencies_throughput_and_cache_share() -> None:
    records = [
        _record(),
        _record(agent=1, t_start=2.0, t_end=10.0, ttft_s=3.0, cached_tokens=0, prompt_tokens=300,
                expected_prompt_tokens=300),
        _record(agent=2, outcome="timeout", error="x", ttft_s=None, chunks=[], prompt_tokens=None,
                completion_tokens=None, cached_tokens=None, status=200),
        _record(agent=3, outcome="http_error", error="500", chunks=[], ttft_s=None,
                prompt_tokens=None, completion_tokens=None, cached_tokens=None, status=500),
        _record(agent=4, outcome="aborted", error="stop", chunks=[(0.5, 3)], ttft_s=0.5,
                prompt_tokens=None, completion_tokens=None, cached_tokens=None),
    ]  # fmt: skip
    s = summarize(records)
    assert (s.requests, s.turns_ok, s.errors, s.timeouts, s.aborted) == (5, 2, 1, 1, 1)
    assert s.outcomes["stream_error"] == 0 and s.outcomes["http_error"] == 1
    assert s.span_s == 10.0
    assert s.prompt_tokens == 400 and s.cached_prompt_tokens == 60
    assert s.cached_prompt_pct == 15.0
    assert s.generated_tokens == 5 + 5 + 3  # the aborted turn's streamed tokens count too
    assert s.decode_tok_s == 1.3
    assert s.ttft_s is not None and (s.ttft_s.p50, s.ttft_s.max) == (1.0, 3.0)
    # per token gaps: (2-1)/2 twice and (4-2)/2 twice, per ok record -> 0.5 x4, 1.0 x4
    assert s.itl_s is not None and s.itl_s.count == 8 and s.itl_s.p50 == 0.5 and s.itl_s.max == 1.0
    assert s.e2e_s is not None and s.e2e_s.p90 == 8.0
    assert s.prompt_size_mismatches == 0


def test_empty_run_summarises_to_zeros() -> None:
    s = summarize([])
    assert s.requests == 0 and s.ttft_s is None and s.decode_tok_s is None
    assert s.cached_prompt_pct is None


def test_weighted_percentiles() -> None:
    p = percentiles([1.0, 10.0], [99, 1])
    assert p is not None and (p.p50, p.p90, p.p99, p.max, p.count) == (1.0, 1.0, 1.0, 10.0, 100)
    assert percentiles([]) is None


def test_records_round_trip_one_flushed_line_each(tmp_path: Path) -> None:
    path = tmp_path / "run" / "turns.jsonl"
    with RecordWriter(path) as writer:
        writer.write(_record())
        assert path.read_text().count("\n") == 1  # flushed before the writer closes
        writer.write(_record(agent=7, outcome="stream_error", error="bad"))
    assert read_records(path.parent) == [
        _record(),
        _record(agent=7, outcome="stream_error", error="bad"),
    ]
    line = path.read_text().splitlines()[0]
    assert line.startswith('{"agent":0,"session":0,"turn":0,"attempt":0,"t_start":0.0')
    assert '"chunks":[[1.0,1],[2.0,2],[4.0,2]]' in line


def test_reader_skips_a_last_line_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    with RecordWriter(path) as writer:
        writer.write(_record())
    with path.open("a") as raw:
        raw.write('{"agent": 1, "sess')
    assert read_records(path) == [_record()]


def test_a_writer_that_keeps_its_records_holds_what_the_file_reads(tmp_path: Path) -> None:
    records = [_record(agent=i, t_end=4.0 + i / 3) for i in range(5)]
    path = tmp_path / "turns.jsonl"
    with RecordWriter(path, keep_chunks=100) as writer:
        for r in records:
            writer.write(r)
        assert writer.kept == read_records(path) == records
    writer.write(_record(agent=9))  # after close: neither written nor kept
    assert writer.kept == read_records(path)
    # past its room for chunks it keeps none (the file is read back instead)
    with RecordWriter(tmp_path / "small.jsonl", keep_chunks=7) as small:
        for r in records:
            small.write(r)
        assert small.kept is None
    # a file that already held lines is not what the writer saw: read it back
    with RecordWriter(path, keep_chunks=100) as again:
        again.write(records[0])
        assert again.kept is None and len(read_records(path)) == 6
