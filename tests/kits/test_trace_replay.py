"""Trace replay on the virtual clock: a run exported and replayed gives the same requests, the
restore-stall kit's workload as a trace livelocks as the kit does, and `kit trace` and a bad
trace through the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contract.records import read_records
from contract.trace import MooncakeLine, read_trace, write_trace
from kits.cli import app
from kits.config import load_kit
from kits.vclock import run_virtual_arm
from loadgen import mooncake_lines, workload_calls
from tests.support import kit as kit_process
from tests.support import one_error_line, served_sim

runner = CliRunner()

#: four agents sharing a system prompt of two whole trace blocks (a trace shares whole blocks),
#: their sessions restarting often, for five minutes
SMALL = {"load.duration_s": 300, "load.agents": 4, "load.shared_system_prompt": True,
         "load.min_context": 4000, "load.max_context": 12000,
         "load.system_prompt_tokens": 1024}  # fmt: skip


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
    run_virtual_arm(load_kit("restore-stall", SMALL), "fix", "sim:fix", root / "arm")
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
    kit = load_kit("restore-stall", {**SMALL, "load.trace": str(root / "trace.jsonl")})
    run_virtual_arm(kit, "fix", "sim:fix", tmp_path)
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
    synthetic = run_virtual_arm(kit, "base", "sim:base", tmp_path / "synthetic")
    assert synthetic.stalled
    sizes = [(r.prompt_tokens, r.completion_tokens) for r in read_records(tmp_path / "synthetic")]
    write_trace(tmp_path / "workload.jsonl", workload_calls(kit.load, 60))
    write_trace(tmp_path / "run.jsonl", mooncake_lines(read_records(tmp_path / "synthetic"), 512))
    for name in ("workload", "run"):
        trace = str(tmp_path / f"{name}.jsonl")
        replayed_kit = load_kit("restore-stall", {"load.duration_s": 1200, "load.trace": trace})
        replayed = run_virtual_arm(replayed_kit, "base", "sim:base", tmp_path / name)
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
