"""The regression scenario (`kit sim trace`): base livelocks from the fourth step, fix does not."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from stallkit.engine.sim.trace import CASES, Case, prepare, run_trace
from stallkit.kits.cli import app


@pytest.mark.parametrize("case", CASES)
def test_base_schedules_nothing_from_the_fourth_step_on(case: Case) -> None:
    rows = run_trace("base", case, steps=40)
    assert [row.step for row in rows] == list(range(1, 41))
    assert all(row.scheduled_tokens for row in rows[:3])  # it did run before
    for row in rows[3:]:
        assert row.scheduled_tokens == 0 and row.preemptions == 0
        assert row.turn == "prefill"  # the same empty prefill turn, chosen again
        assert row.restores_polled == 2  # the restores are polled, and refused, every step
        assert row.kv_usage == 1.0
    assert len({(r.vruntime_prefill, r.vruntime_decode) for r in rows[3:]}) == 1


@pytest.mark.parametrize("case", CASES)
def test_fix_preempts_a_decode_and_keeps_going(case: Case) -> None:
    rows = run_trace("fix", case, steps=40)
    assert sum(row.preemptions for row in rows) == 1
    first = next(row.step for row in rows if row.preemptions)
    after = rows[first:]
    assert all(row.scheduled_tokens > 0 for row in rows[first - 1 :])
    assert all(row.decode_tokens == 1 and row.running == 1 for row in after)
    # the waiting restores (and the preempted decode) are polled again, waiting for capacity
    assert all(row.restores_polled >= 2 for row in after)
    assert all(row.deferred == row.waiting for row in after)
    assert {row.turn for row in after} == {"prefill", "decode"}


def test_a_stuck_base_engine_still_spins_visibly() -> None:
    engine, now = prepare("base", "full-slots")
    for _ in range(5):
        now += engine.step(now).duration_s
    before = engine.stats
    for _ in range(100):
        result = engine.step(now)
        assert not result.gpu_busy
        now += result.duration_s
    after = engine.stats
    assert after.generation_tokens == before.generation_tokens
    assert after.prefix_cache_queries > before.prefix_cache_queries  # the scheduler spins
    assert after.empty_steps == before.empty_steps + 100
    assert after.busy_s == before.busy_s
    assert after.num_running == 2 and after.waiting_by_reason == {"capacity": 0, "deferred": 2}
    assert after.restores_recomputed == 0


def test_cli_trace_json_prints_one_object_per_step() -> None:
    result = CliRunner().invoke(
        app, ["sim", "trace", "--policy", "base", "--case", "free-slot", "--steps", "7", "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [row["step"] for row in rows] == list(range(1, 8))
    for key in ("turn", "scheduled_tokens", "preemptions", "restores_polled", "kv_usage"):
        assert key in rows[0]
    assert [row["scheduled_tokens"] for row in rows[3:]] == [0, 0, 0, 0]
    assert {row["slots"] for row in rows} == {3} and {row["running"] for row in rows} == {2}


def test_cli_trace_tables_of_the_two_cases_differ_in_their_slots() -> None:
    tables = {}
    for case in CASES:
        result = CliRunner().invoke(app, ["sim", "trace", "--policy", "base", "--case", case])
        assert result.exit_code == 0, result.output
        tables[case] = result.output
    assert " 2/2 " in tables["full-slots"] and " 2/3 " not in tables["full-slots"]
    assert " 2/3 " in tables["free-slot"]


def test_cli_trace_table_for_humans() -> None:
    result = CliRunner().invoke(app, ["sim", "trace", "--policy", "fix", "--steps", "6"])
    assert result.exit_code == 0, result.output
    assert "policy fix" in result.output and "prefill" in result.output
    bad = CliRunner().invoke(app, ["sim", "trace", "--policy", "turbo"])
    assert bad.exit_code == 2
