"""Whole runs of agents against the hostile server: failures are data, the run always finishes."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import stallkit.loadgen.agents
from stallkit.contract.summary import summarize
from stallkit.loadgen.agents import AgentState, LoadEvent, RunFinished, TurnFinished, run_agents
from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.errors import LoadError
from stallkit.loadgen.preflight import preflight
from stallkit.loadgen.records import read_records

pytestmark = pytest.mark.wallclock

SMALL = {
    "min_context": 200,
    "max_context": 800,
    "system_prompt_tokens": 40,
    "new_tokens_min": 20,
    "new_tokens_max": 100,
    "reply_tokens_min": 3,
    "reply_tokens_max": 8,
    "think_min_s": 0.0,
    "think_max_s": 0.05,
    "stagger_s": 0.02,
}


async def _run(url: str, out: Path | None, **overrides: Any) -> list[LoadEvent]:
    cfg = LoadConfig.model_validate({**SMALL, **overrides})
    info = await preflight(url, cfg)
    async with contextlib.aclosing(run_agents(info, cfg, out)) as events:
        return [event async for event in events]


def _records(events: list[LoadEvent]) -> list[Any]:
    return [e.record for e in events if isinstance(e, TurnFinished)]


async def test_every_failure_is_recorded_and_agents_keep_going(
    hostile: Any, tmp_path: Path
) -> None:
    script = ["ok", "stall", "error", "malformed", "nodone", "500", "drop", "dropmid", "trickle"]
    async with hostile(script=script, gap_s=0.05, trickle_gap_s=0.2) as server:
        events = await _run(
            server.url, tmp_path, agents=4, max_turns=5, max_retries=1, read_timeout_s=0.6
        )
    assert isinstance(events[-1], RunFinished) and events[-1].reason == "done"
    records = _records(events)
    assert read_records(tmp_path) == records  # everything emitted is on disk, in order
    outcomes = Counter(r.outcome for r in records)
    assert {"ok", "timeout", "stream_error", "http_error", "connect_error"} <= set(outcomes)
    for agent in range(4):
        mine = [r for r in records if r.agent == agent]
        assert len({(r.session, r.turn) for r in mine}) == 5  # all planned turns were played
        assert max(r.attempt for r in mine) <= 1
        done = [e for e in events if isinstance(e, AgentState) and e.agent == agent]
        assert done[-1].state == "done"
    for record in records:
        if record.outcome == "ok":
            assert record.prompt_tokens == record.expected_prompt_tokens
            assert record.error is None
        else:
            assert record.error
    summary = summarize(records)
    assert summary.requests == len(records) and summary.timeouts == outcomes["timeout"]


async def test_prompts_hit_planned_sizes_and_carry_the_previous_reply(hostile: Any) -> None:
    async with hostile(script=["ok"], tokens_per_reply=4) as server:
        events = await _run(server.url, None, agents=2, max_turns=6, seed=11, reply_tokens_min=4)
        bodies = server.bodies
    records = _records(events)
    assert all(r.outcome == "ok" for r in records) and len(records) == 12
    assert all(r.prompt_tokens == r.expected_prompt_tokens for r in records)
    for body in bodies:
        assert body["stream"] is True and body["ignore_eos"] is True
        assert body["stream_options"] == {"include_usage": True}
    follow_ups = [b for b in bodies if len(b["messages"]) > 2]
    assert follow_ups
    for body in follow_ups:
        roles = [m["role"] for m in body["messages"]]
        assert roles[0] == "system" and roles[-2:] == ["assistant", "user"]
        assert body["messages"][-2]["content"] == " tok" * 4


async def test_duration_end_aborts_in_flight_streams(hostile: Any, tmp_path: Path) -> None:
    async with hostile(script=["stall"], gap_s=0.01, hold_s=20) as server:
        events = await _run(server.url, tmp_path, agents=3, duration_s=1.0, read_timeout_s=30)
    assert isinstance(events[-1], RunFinished) and events[-1].reason == "duration"
    records = read_records(tmp_path)
    assert len(records) == 3
    assert {r.outcome for r in records} == {"aborted"}
    assert all(r.streamed_tokens == 3 for r in records)


async def test_closing_the_event_stream_stops_agents_and_records_aborts(
    hostile: Any, tmp_path: Path
) -> None:
    cfg = LoadConfig.model_validate({**SMALL, "agents": 2, "read_timeout_s": 30})
    async with hostile(script=["stall"], gap_s=0.01, hold_s=20) as server:
        info = await preflight(server.url, cfg)
        streaming = 0
        async with contextlib.aclosing(run_agents(info, cfg, tmp_path)) as events:
            async for event in events:
                if isinstance(event, AgentState) and event.state == "streaming":
                    streaming += 1
                    if streaming == 2:
                        break
    records = read_records(tmp_path)
    assert records and {r.outcome for r in records} == {"aborted"}


async def test_preflight_picks_the_only_model_and_sends_the_api_key(
    hostile: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_LOAD_KEY", "sekrit")
    async with hostile() as server:
        info = await preflight(server.url + "/v1/", LoadConfig(api_key_env="TEST_LOAD_KEY"))
        assert server.auth and set(server.auth) == {"Bearer sekrit"}
    assert info.model == "hostile" and info.base_url == server.url
    assert info.tokenize == "server" and info.additive


@pytest.mark.parametrize(
    ("options", "cfg", "message"),
    [
        ({"models_body": b"<html>hello</html>"}, {}, "not an OpenAI-compatible server"),
        ({"max_model_len": 50_000}, {}, "max_model_len 50000"),
        ({"models": ("a", "b")}, {}, "serves 2 models"),
        ({}, {"model": "other"}, "does not serve model 'other'"),
        ({"tokenize": False}, {}, "cannot count tokens"),
        ({}, {"api_key_env": "TEST_LOAD_UNSET_VARIABLE"}, "is not set"),
    ],
)
async def test_preflight_refuses_before_any_agent_starts(
    hostile: Any, options: dict[str, Any], cfg: dict[str, Any], message: str
) -> None:
    async with hostile(**options) as server:
        with pytest.raises(LoadError, match=message) as caught:
            await preflight(server.url, LoadConfig.model_validate(cfg))
        assert not server.bodies  # no chat request was sent
    assert caught.value.hint


async def test_preflight_on_a_dead_url(closed_port_url: str) -> None:
    with pytest.raises(LoadError, match="cannot reach"):
        await preflight(closed_port_url, LoadConfig())


async def test_request_rate_cap_spaces_request_starts(hostile: Any) -> None:
    async with hostile(script=["ok"]) as server:
        events = await _run(
            server.url, None, agents=4, max_turns=2, stagger_s=0, think_max_s=0,
            request_rate=10.0,
        )  # fmt: skip
    starts = sorted(r.t_start for r in _records(events))
    assert len(starts) == 8
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.09  # at most one request per 0.1 s


async def test_a_request_held_back_by_the_rate_cap_is_not_queued(hostile: Any) -> None:
    """`queued` means sent: a run's own clients count queued requests as work the engine owes
    them (a wedge whose gauges read idle), so one still waiting on the cap must not count."""
    async with hostile(script=["ok"]) as server:
        events = await _run(
            server.url, None, agents=4, max_turns=1, stagger_s=0, think_max_s=0,
            request_rate=4.0,
        )  # fmt: skip
    queued: set[int] = set()
    most = 0
    for event in events:
        if isinstance(event, AgentState):
            if event.state == "queued":
                queued.add(event.agent)
            else:
                queued.discard(event.agent)
            most = max(most, len(queued))
    assert len(_records(events)) == 4
    assert most <= 2  # one request per 0.25 s, each answered at once: never four sent together


async def test_an_agent_is_queued_until_its_first_token_arrives(hostile: Any) -> None:
    """No byte yet: `queued`; tokens arriving: `streaming` (the dashboard shows the difference)."""
    async with hostile(script=["stall", "trickle"], stall_tokens=0, trickle_gap_s=0.2) as server:
        events = await _run(
            server.url, None, agents=1, max_turns=2, max_retries=0, read_timeout_s=0.5
        )
    states = [e.state for e in events if isinstance(e, AgentState)]
    first_fail = states.index("failed")
    assert states[:first_fail] == ["waiting", "queued"]  # the stalled request never streamed
    rest = states[first_fail + 1 :]
    assert rest[:2] == ["queued", "streaming"] and rest[-1] == "done"


class _Wakes:
    """When a coroutine of ``stallkit.loadgen.agents`` resumes in an agent's task, seen by ``sys.setprofile``
    (which reports each resumption of a coroutine as a call)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._previous: Any = None

    def _hook(self, frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if event != "call" or code.co_filename != stallkit.loadgen.agents.__file__:
            return
        if code.co_flags & inspect.CO_COROUTINE:
            task = asyncio.current_task()
            if task is not None and task.get_name().startswith("agent-"):
                self.times.append(time.perf_counter())

    def __enter__(self) -> _Wakes:
        self._previous = sys.getprofile()
        sys.setprofile(self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self._previous)

    def between(self, start: float, end: float) -> int:
        return sum(start <= t <= end for t in self.times)


async def _timed_run(url: str, **overrides: Any) -> list[tuple[float, LoadEvent]]:
    """The run's events, each with the wall time (perf_counter) the consumer got it."""
    cfg = LoadConfig.model_validate({**SMALL, **overrides})
    info = await preflight(url, cfg)
    async with contextlib.aclosing(run_agents(info, cfg)) as events:
        return [(time.perf_counter(), event) async for event in events]


@pytest.mark.parametrize(("behaviour", "options"), [("silent", {}), ("stall", {"stall_tokens": 0})])
async def test_a_request_that_sends_no_token_leaves_its_agent_asleep_until_the_timeout(
    hostile: Any, behaviour: str, options: dict[str, Any]
) -> None:
    """Not a byte (or the head only): `queued` until the read timeout, and no wake-up meanwhile."""
    async with hostile(script=[behaviour], hold_s=10, **options) as server:
        with _Wakes() as wakes:
            events = await _timed_run(
                server.url, agents=1, max_turns=1, max_retries=0, read_timeout_s=1.0
            )
    states = [e.state for _, e in events if isinstance(e, AgentState)]
    assert states == ["waiting", "queued", "failed", "done"]
    [(finished, turn)] = [(t, e) for t, e in events if isinstance(e, TurnFinished)]
    record = turn.record
    assert record.outcome == "timeout" and not record.chunks and record.ttft_s is None
    assert record.t_end - record.t_start >= 1.0
    queued = next(t for t, e in events if isinstance(e, AgentState) and e.state == "queued")
    # the agent's coroutines resume once, when the request ends (a few frames, one each); a
    # poll every 50 ms would resume them some 80 times over the second of silence
    assert wakes.between(queued, finished) <= 6


async def test_streaming_is_shown_once_per_request_as_soon_as_its_first_token_arrives(
    hostile: Any,
) -> None:
    async with hostile(script=["trickle"], trickle_gap_s=0.1, trickle_tokens=3) as server:
        events = await _run(server.url, None, agents=3, max_turns=2, think_max_s=0)
    records = _records(events)
    assert len(records) == 6 and {r.outcome for r in records} == {"ok"}
    for agent in range(3):
        mine = [e for e in events if isinstance(e, AgentState) and e.agent == agent]
        assert [e.state for e in mine] == [
            "waiting",
            *["queued", "streaming", "thinking"] * 2,
            "done",
        ]
        streaming = [e for e in mine if e.state == "streaming"]
        turns = [r for r in records if r.agent == agent]
        for state, record in zip(streaming, turns, strict=True):
            assert record.ttft_s is not None
            lag_s = state.t - (record.t_start + record.ttft_s)
            # the trickle's first token comes at once: a 50 ms poll would show it ~45 ms late
            assert -1e-6 <= lag_s < 0.025
