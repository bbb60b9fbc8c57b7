"""Trace replay on the virtual clock: a run exported and replayed gives the same requests, the
restore-stall kit's workload as a trace livelocks as the kit does, and `kit trace` and a bad
trace through the command line. Over HTTP, against the simulator: what a run records of the
sessions that ran, the salted text that keeps two traces' prefix caches apart, the window."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stallkit.contract.records import read_records
from stallkit.contract.trace import MooncakeLine, read_trace, write_trace
from stallkit.engine import parse_spec
from stallkit.kits.arm.virtual import run_virtual_arm
from stallkit.kits.cli import app
from stallkit.kits.kit import load_kit
from stallkit.loadgen import mooncake_lines, workload_calls
from tests.support import kit as kit_process
from tests.support import one_error_line, served_sim

runner = CliRunner()

#: four agents sharing a system prompt of two whole trace blocks (a trace shares whole blocks),
#: their sessions restarting often, for five minutes
SMALL = {"load.duration_s": 300, "load.agents": 4, "load.shared_system_prompt": True,
         "load.min_context": 4000, "load.max_context": 12000,
         "load.system_prompt_tokens": 1024}  # fmt: skip

#: the same settings for a replay: a trace runs one agent per session, so no agent count
REPLAY = {key: value for key, value in SMALL.items() if key != "load.agents"}


def _shape(lines: list[MooncakeLine]) -> list[tuple[Any, ...]]:
    """Each request's session (by order of first appearance), sizes and blocks."""
    order: dict[str | None, int] = {}
    return [
        (order.setdefault(x.session_id, len(order)), x.input_length, x.output_length, x.hash_ids)
        for x in lines
    ]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[MooncakeLine]]:
    """A synthetic virtual-clock run and its export."""
    root = tmp_path_factory.mktemp("recorded")
    run_virtual_arm(load_kit("restore-stall", SMALL), "fix", parse_spec("sim:fix"), root / "arm")
    lines = mooncake_lines(read_records(root / "arm"), 512)
    write_trace(root / "trace.jsonl", lines)
    return root, lines


def test_a_run_exported_and_replayed_gives_the_same_requests(
    recorded: tuple[Path, list[MooncakeLine]], tmp_path: Path
) -> None:
    root, lines = recorded
    assert len(lines) > 20
    sessions = {x.session_id for x in lines}
    first_blocks = [x.hash_ids[0] for x in lines if x.timestamp is not None and x.hash_ids]
    assert len(sessions) > 4 and len(set(first_blocks)) == 1  # the system prompt is shared
    kit = load_kit("restore-stall", {**REPLAY, "load.trace": str(root / "trace.jsonl")})
    run_virtual_arm(kit, "fix", parse_spec("sim:fix"), tmp_path)
    records = read_records(tmp_path)
    # the requests in flight when the run ended are in the trace, and end the replay the same way
    assert {r.outcome for r in records} == {"ok", "aborted"}
    # every prompt is the size the trace says: the kept conversation plus the line's tokens
    again = mooncake_lines(records, 512)
    assert _shape(again) == _shape(lines)
    for before, after in zip(lines, again, strict=True):
        assert (
            before.timestamp == after.timestamp
            or abs((before.delay or 0) - (after.delay or 0)) <= 1
        )


def test_the_restore_stall_workload_and_its_run_as_traces_livelock_as_the_kit_does(
    tmp_path: Path,
) -> None:
    """The kit's workload as a sessions trace, and the stalled run exported as a
    mooncake_trace: both replays reach the base livelock at the same engine second."""
    kit = load_kit("restore-stall", {"load.duration_s": 1200})
    synthetic = run_virtual_arm(kit, "base", parse_spec("sim:base"), tmp_path / "synthetic")
    assert synthetic.stalled
    sizes = [(r.prompt_tokens, r.completion_tokens) for r in read_records(tmp_path / "synthetic")]
    write_trace(tmp_path / "workload.jsonl", workload_calls(kit.load, 60))
    write_trace(tmp_path / "run.jsonl", mooncake_lines(read_records(tmp_path / "synthetic"), 512))
    for name in ("workload", "run"):
        trace = str(tmp_path / f"{name}.jsonl")
        replayed_kit = load_kit("restore-stall", {"load.duration_s": 1200, "load.trace": trace})
        replayed = run_virtual_arm(replayed_kit, "base", parse_spec("sim:base"), tmp_path / name)
        assert replayed.stalled, name
        assert (replayed.end_reason, replayed.engine_s) == (
            synthetic.end_reason,
            synthetic.engine_s,
        )
        records = read_records(tmp_path / name)
        assert sorted((r.prompt_tokens, r.completion_tokens) for r in records) == sorted(sizes)


def test_kit_trace_commands(recorded: tuple[Path, list[MooncakeLine]], tmp_path: Path) -> None:
    root, lines = recorded
    out = tmp_path / "again.jsonl"
    done = runner.invoke(app, ["trace", "export", str(root / "arm"), "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert [x for _, x in read_trace(out).mooncake] == lines
    done = runner.invoke(app, ["trace", "stats", str(out), "--json"])
    assert done.exit_code == 0 and '"requests": ' + str(len(lines)) in done.output
    done = runner.invoke(app, ["trace", "export", str(root), "--out", str(out)])
    assert done.exit_code == 2 and "arm" in done.output  # the arm directories are named
    gen = tmp_path / "gen.jsonl"
    done = runner.invoke(app, ["trace", "generate", "--kit", "restore-stall", "--turns", "3",
                               "--out", str(gen)])  # fmt: skip
    assert done.exit_code == 0 and len(read_trace(gen)) == 12 * 3


def test_a_bad_trace_line_stops_the_ab_before_anything_runs(tmp_path: Path) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"delay": -1}\n')
    out = tmp_path / "ab"
    done = runner.invoke(app, ["ab", "--trace", str(trace), "--seeds", "1", "--out", str(out)])
    assert done.exit_code == 2 and "Traceback" not in done.output
    assert [line for line in done.output.splitlines() if line.startswith("error:")] == [
        f"error: {trace}:2: delay: Input should be greater than or equal to 0 (mooncake_trace "
        "line) (hint: each line is one JSON object of the trace's format (see `kit trace "
        "--help`))"
    ]
    assert not out.exists()


@pytest.mark.wallclock
def test_kit_load_replays_a_trace_over_http(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 1200, "output_length": 20, "hash_ids": [0, 1, 2]}\n'
        '{"session_id": "s", "timestamp": 400, "input_length": 700, "output_length": 10, '
        '"hash_ids": [0, 6]}\n'
        '{"session_id": "s", "delay": 200, "input_length": 300, "output_length": 12}\n'
        '{"session_id": "s", "delay": 10, "output_length": 2, "messages": [{"role": "system", '
        '"content": "a b"}, {"role": "user", "content": "c d e"}]}\n'
    )
    with served_sim("--time-scale", "20") as url:
        done = kit_process("load", url, "--trace", str(trace), "--trace-speed", "2",
                           "--out", str(tmp_path / "run"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = sorted(read_records(tmp_path / "run"), key=lambda r: r.t_start)
    assert [(r.agent, r.session, r.turn, r.completion_tokens) for r in records] == [
        (0, 0, 0, 20), (1, 0, 0, 10), (1, 0, 1, 12), (1, 1, 0, 2)
    ]  # fmt: skip
    # the simulator's template: a role marker per message and one for the reply; a whole
    # chat is sent as it is, without the conversation before it
    assert [r.prompt_tokens for r in records] == [1202, 702, 702 + 10 + 1 + 300 + 1, 8]
    assert records[1].t_start >= 0.2  # 400 ms of trace time at twice the speed
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5}\n')
    line = one_error_line(kit_process("load", "http://127.0.0.1:9", "--trace", str(bad),
                                      "--out", str(tmp_path / "none")))  # fmt: skip
    assert f"{bad}:1:" in line and not (tmp_path / "none").exists()


def _load_json(run: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run / "load.json").read_text())
    return loaded


@pytest.mark.wallclock
def test_kit_load_records_the_sessions_that_ran_not_the_default_agents(tmp_path: Path) -> None:
    trace = tmp_path / "many.jsonl"
    trace.write_text("".join(
        f'{{"session_id": "s{i}", "timestamp": {5 * i}, "input_length": 30, "output_length": 2}}\n'
        for i in range(200)
    ))  # fmt: skip
    with served_sim("--time-scale", "20") as url:
        done = kit_process("load", url, "--trace", str(trace), "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "load: 200 sessions (an agent each; 200 requests over 1.0 trace s)" in said
    assert "done 200" in said  # the progress line: every session's agent, done
    meta = _load_json(tmp_path / "run")
    assert meta["config"]["agents"] == 200
    assert {k: meta["trace"][k] for k in ("sessions", "requests", "left_out", "span_s")} == {
        "sessions": 200, "requests": 200, "left_out": 0, "span_s": 0.995
    }  # fmt: skip
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["agents"] == 200 and 1 <= summary["peak_in_flight"] < 200
    assert f"200 / {summary['peak_in_flight']}" in done.stdout  # the summary's row


@pytest.mark.wallclock
def test_two_traces_share_no_prefix_cache_unless_asked(tmp_path: Path) -> None:
    """The same hash_ids in two traces are other text (the simulator hashes words), the same
    trace and seed again is the same text, and a salt given on purpose shares across traces."""
    ids = list(range(13))
    for name, out in (("a", 4), ("b", 5)):
        line = {"timestamp": 0, "input_length": 6400, "output_length": out, "hash_ids": ids}
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(line) + "\n")

    def cached(url: str, name: str, *flags: str) -> int | None:
        run = tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}"
        done = kit_process("load", url, "--trace", str(tmp_path / f"{name}.jsonl"),
                           "--out", str(run), *flags)  # fmt: skip
        assert done.returncode == 0, done.stderr
        (record,) = read_records(run)
        return record.cached_tokens

    with served_sim("--time-scale", "20") as url:
        assert cached(url, "a") == 0
        assert cached(url, "b") == 0  # 6,272 tokens (12 blocks of 512, then 16s) before salts
        assert cached(url, "a") == 6272  # a rerun: the same text
        assert cached(url, "a", "--trace-salt", "") == 0
        assert cached(url, "b", "--trace-salt", "") == 6272  # shared on purpose


@pytest.mark.wallclock
def test_a_slice_from_the_middle_of_a_trace_starts_at_once(tmp_path: Path) -> None:
    trace = tmp_path / "long.jsonl"
    trace.write_text("".join(
        f'{{"timestamp": {t}, "input_length": 20, "output_length": 2}}\n'
        for t in (0, 600_000, 600_300, 900_000)
    ))  # fmt: skip
    with served_sim("--time-scale", "20") as url:
        done = kit_process("load", url, "--trace", str(trace), "--out", str(tmp_path / "run"),
                           "--fixed-schedule-start-offset", "590000",
                           "--fixed-schedule-end-offset", "600300",
                           "--fixed-schedule-auto-offset")  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = sorted(read_records(tmp_path / "run"), key=lambda r: r.t_start)
    assert len(records) == 2 and records[0].t_start < 2.0  # not after 600 s
    assert 0.3 <= records[1].t_start < 2.3
    trace_meta = _load_json(tmp_path / "run")["trace"]
    assert (trace_meta["zero_ms"], trace_meta["left_out"], trace_meta["span_s"]) == (600000, 2, 0.3)


def test_a_kits_trace_window_and_salt_on_the_virtual_clock(
    recorded: tuple[Path, list[MooncakeLine]], tmp_path: Path
) -> None:
    """Kit keys cut the window; the kit says one agent per session in it; both arms and a
    rerun replay the same salted text and record the same trace, byte for byte."""
    root, lines = recorded
    firsts = sorted(x.timestamp for x in lines if x.timestamp is not None)
    keys = {**REPLAY, "load.trace": str(root / "trace.jsonl"), "load.duration_s": 120,
            "load.trace_start_offset_ms": int(firsts[2]), "load.trace_auto_offset": True}  # fmt: skip
    kit = load_kit("restore-stall", keys)
    assert kit.load.agents == sum(1 for t in firsts if t >= int(firsts[2]))
    run_virtual_arm(kit, "base", parse_spec("sim:base"), tmp_path / "base")
    run_virtual_arm(kit, "fix", parse_spec("sim:fix"), tmp_path / "fix")
    run_virtual_arm(kit, "base", parse_spec("sim:base"), tmp_path / "again")
    metas = [json.loads((tmp_path / d / "meta.json").read_text()) for d in ("base", "fix", "again")]
    assert metas[0]["trace"] == metas[1]["trace"] == metas[2]["trace"]
    assert metas[0]["trace"]["left_out"] > 0 and metas[0]["trace"]["text_salt"]
    turns = [(tmp_path / d / "turns.jsonl").read_bytes() for d in ("base", "again")]
    assert turns[0] == turns[1]
    first = min(read_records(tmp_path / "base"), key=lambda r: r.t_start)
    assert first.t_start < 1.0  # auto offset: the slice's first session starts the run
    other = load_kit("restore-stall", {**keys, "load.seed": 1})
    run_virtual_arm(other, "base", parse_spec("sim:base"), tmp_path / "seed1")
    salt = json.loads((tmp_path / "seed1" / "meta.json").read_text())["trace"]["text_salt"]
    assert salt != metas[0]["trace"]["text_salt"]


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--fixed-schedule-start-offset", "-5"], "--fixed-schedule-start-offset"),
        (["--fixed-schedule-end-offset", "-1"], "--fixed-schedule-end-offset"),
        (["--fixed-schedule-start-offset", "900", "--fixed-schedule-end-offset", "800"],
         "must not be below"),
        (["--fixed-schedule-start-offset", "99000000"], "holds none of the"),
    ],
)  # fmt: skip
def test_bad_window_flags_are_one_line_and_exit_2(
    recorded: tuple[Path, list[MooncakeLine]], tmp_path: Path, flags: list[str], words: str
) -> None:
    trace = str(recorded[0] / "trace.jsonl")
    for command in (["ab", "--dry-run"], ["load", "http://127.0.0.1:9"]):
        done = runner.invoke(app, [*command, "--trace", trace, *flags,
                                   "--out", str(tmp_path / "none")])  # fmt: skip
        errors = [line for line in done.output.splitlines() if line.startswith("error:")]
        assert done.exit_code == 2 and len(errors) == 1, done.output
        assert words in errors[0] and "hint:" in errors[0], errors
        assert not (tmp_path / "none").exists()


GOOD_LINE = b'{"timestamp": 0, "input_length": 5, "output_length": 1}\n'


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (GOOD_LINE + b"not json\n", ":2: line: not valid JSON"),
        (GOOD_LINE + b'{"timestamp": 1\xff}\n', ": not UTF-8 (byte 0xFF at offset 71, line 2)"),
    ],
)
def test_a_trace_that_is_not_utf8_or_not_json_lines_names_the_line(
    tmp_path: Path, body: bytes, says: str
) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_bytes(body)
    for command in (["trace", "stats"], ["ab", "--dry-run", "--trace"], ["load", "--trace"]):
        url = ["http://127.0.0.1:9"] if command[0] == "load" else []
        done = runner.invoke(app, [*command, str(trace), *url])
        errors = [line for line in done.output.splitlines() if line.startswith("error:")]
        assert done.exit_code == 2 and len(errors) == 1, done.output
        assert f"{trace}{says}" in errors[0], errors


def test_kit_trace_stats_names_both_hit_figures_and_the_span(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 1000, "input_length": 1024, "output_length": 1, "hash_ids": [0, 1]}\n'
        '{"timestamp": 4500, "input_length": 2048, "output_length": 1, "hash_ids": [0, 1, 2, 3]}\n'
    )
    done = runner.invoke(app, ["trace", "stats", str(trace)], terminal_width=200)
    assert done.exit_code == 0, done.output
    assert "2 requests in 2 sessions, 3.5 s from first to last arrival" in done.output
    assert "33.3%  token-weighted, whole trace" in done.output  # 1024 of 3072 tokens
    # per request: 0 of 2 blocks, then 2 of 4
    assert "25.0%  per-request mean (AIPerf analyze-trace's cache hit rate)" in done.output
    numbers = json.loads(runner.invoke(app, ["trace", "stats", str(trace), "--json"]).output)
    assert (numbers["span_s"], numbers["cache_hit_rate_per_request"]) == (3.5, 0.25)
