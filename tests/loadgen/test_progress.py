"""The progress and summary views, rendered into a string."""

from __future__ import annotations

import io

from rich.console import Console

from stallkit.contract.summary import summarize
from stallkit.loadgen.agents import AgentState, RunFinished, TurnFinished
from stallkit.loadgen.progress import LoadProgress, live_progress, summary_table
from stallkit.loadgen.records import Outcome, TurnRecord


def _render(renderable: object) -> str:
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(renderable)
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()


def _record(outcome: Outcome) -> TurnRecord:
    return TurnRecord(
        agent=0, session=0, turn=0, attempt=0, t_start=0.0, t_end=2.0, ttft_s=0.5,
        chunks=[(0.5, 1), (1.0, 1)], expected_prompt_tokens=10, prompt_tokens=10,
        completion_tokens=2, cached_tokens=4, max_tokens=2, outcome=outcome,
        error=None if outcome == "ok" else "x", status=200,
    )  # fmt: skip


def test_progress_shows_elapsed_outcomes_and_agent_states() -> None:
    now = [100.0]
    progress = LoadProgress(3, duration_s=60, clock=lambda: now[0])
    progress.update(AgentState(0, "streaming", 1.0))
    progress.update(AgentState(2, "failed", 1.0))
    progress.update(TurnFinished(_record("ok")))
    progress.update(TurnFinished(_record("timeout")))
    now[0] = 112.5
    text = _render(progress)
    assert "elapsed 12.5 s / 60 s" in text
    assert "ok 1" in text and "timeouts 1" in text and "errors 0" in text
    assert "0 streaming" in text and "1 waiting" in text and "2 failed" in text
    progress.update(RunFinished("done", 13.0))
    assert progress.finished is not None


def test_many_agents_are_shown_as_counts_per_state() -> None:
    progress = LoadProgress(500, duration_s=None)
    for agent in range(200):
        progress.update(AgentState(agent, "thinking", 0.0))
    text = _render(progress)
    assert "thinking 200" in text and "waiting 300" in text


def test_summary_table_lists_the_figures() -> None:
    text = _render(summary_table(summarize([_record("ok"), _record("stream_error")])))
    assert "requests" in text and "2" in text
    assert "stream_error 1" in text
    assert "40.0 %" in text  # 8 of 20 prompt tokens cached
    assert "TTFT ms p50/p90/p99/max" in text and "500 / 500 / 500 / 500" in text


def test_live_progress_ends_its_last_line_without_a_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None, force_terminal=False)
    progress = LoadProgress(2, duration_s=3, clock=lambda: 0.0)
    with live_progress(progress, console):
        progress.update(AgentState(0, "thinking", 1.0))
    console.print("load summary")
    text = out.getvalue()
    assert text.endswith("\nload summary\n"), repr(text)
    assert "thinking" in text.splitlines()[-2]
