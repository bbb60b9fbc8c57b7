"""Trace replay as the planner's source: sessions, timing, blocks, plans, stats, generation,
the window, the text's salt and the replay's record.

Pure: traces parsed from files written here, no engine."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from itertools import islice
from pathlib import Path

import pytest
from pydantic import ValidationError

from stallkit.contract.records import TurnRecord
from stallkit.contract.summary import peak_in_flight
from stallkit.contract.trace import Trace, TraceError, read_trace, write_trace
from stallkit.loadgen import LoadConfig
from stallkit.loadgen.agent import Done, Send, Wait
from stallkit.loadgen.records import PromptPart
from stallkit.loadgen.tokens import Message
from stallkit.loadgen.traces.export import BlockNamer, workload_calls
from stallkit.loadgen.traces.replay import Workload, sessions_of, text_salt, workload_for
from stallkit.loadgen.traces.stats import trace_stats
from stallkit.loadgen.traces.window import Window, arrivals_ms, windowed
from stallkit.loadgen.workload import Content, plan_agent

MOONCAKE = [
    '{"timestamp": 0, "input_length": 1200, "output_length": 20, "hash_ids": [0, 1, 2]}',
    '{"timestamp": 100, "input_length": 1800, "output_length": 26, "hash_ids": [0, 3, 4, 5]}',
    '{"session_id": "s1", "timestamp": 50, "input_length": 700, "output_length": 10, '
    '"hash_ids": [0, 6]}',
    '{"session_id": "s1", "delay": 200, "input_length": 300, "output_length": 12}',
    '{"delay": 40, "text_input": "one two three", "output_length": 4}',
]


@pytest.fixture
def mooncake(tmp_path: Path) -> Path:
    path = tmp_path / "mooncake.jsonl"
    path.write_text("\n".join(MOONCAKE) + "\n")
    return path


def test_mooncake_sessions_blocks_and_times(mooncake: Path) -> None:
    sessions = sessions_of(read_trace(mooncake), block_tokens=512, second_s=2.0)
    assert [len(s) for s in sessions] == [1, 1, 2, 1]
    (first,), _, (s1a, s1b), (text,) = sessions
    assert [(p.key, p.tokens) for p in first.content] == [("b0", 512), ("b1", 512), ("b2", 176)]
    assert first.at_s == 0.0 and first.keep_tokens == 0 and first.output_tokens == 20
    assert sessions[1][0].at_s == pytest.approx(0.2)  # 100 ms at 2 s per trace second
    assert s1a.at_s == pytest.approx(0.1) and s1b.at_s is None
    assert s1b.delay_s == pytest.approx(0.4) and s1b.keep_tokens is None  # keeps its history
    assert [(p.key, p.tokens) for p in s1b.content] == [("t4", 300)]  # past its blocks
    # a line without a session and with a delay arrives after the previous such line
    assert text.at_s == pytest.approx(0.2 + 0.08)
    assert text.content[0].words() == ["one", "two", "three"]


def test_a_whole_chat_is_its_templated_words_and_keeps_no_history(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text(
        '{"session_id": "c", "input_length": 50, "output_length": 5}\n'
        '{"session_id": "c", "delay": 1, "output_length": 3, "messages": [{"role": "system", '
        '"content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}\n'
    )
    (first, chat), = sessions_of(read_trace(path), 512, 1.0)  # fmt: skip
    assert first.keep_tokens == 0 and chat.keep_tokens == 0
    assert chat.messages == (("system", "be brief"), ("user", "hi"))
    assert chat.content[0].words() == [
        "<|system|>",
        "be",
        "brief",
        "<|user|>",
        "hi",
        "<|assistant|>",
    ]


def test_equal_block_ids_give_equal_words_and_a_partial_block_is_a_prefix() -> None:
    full, part, other = Content("b7", 512), Content("b7", 100), Content("b8", 512)
    assert full.words()[:100] == part.words()
    assert full.words() != other.words()


def test_a_session_plays_its_turns_in_order_then_is_done(mooncake: Path) -> None:
    cfg = LoadConfig(trace=str(mooncake), trace_second_s=1.0)
    workload = workload_for(cfg)
    assert isinstance(workload, Workload) and workload.agents == 4
    machine = workload.machine(2)
    start = machine.start()
    assert start == Wait(0.0, "start", 0.05) and start.due_s(0.0) == pytest.approx(0.05)
    send = machine.waited()
    assert isinstance(send, Send) and send.plan.turn == 0 and send.plan.max_tokens == 10
    think = machine.answered(True)
    assert isinstance(think, Wait) and think.seconds == pytest.approx(0.2)
    second = machine.waited()
    assert isinstance(second, Send) and second.plan.turn == 1
    assert second.plan.target_prompt_tokens == 700 + 10 + 300
    assert isinstance(machine.answered(True), Done)


def test_session_calls_keep_what_they_cached_and_restart_at_zero(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    path.write_text(
        '{"session_id": "a", "prompt_tokens": 1000, "completion_tokens": 50}\n'
        '{"session_id": "a", "delay": 10, "prompt_tokens": 1200, "completion_tokens": 50, '
        '"cached_tokens": 1050}\n'
        '{"session_id": "a", "delay": 10, "prompt_tokens": 900, "completion_tokens": 50, '
        '"cached_tokens": 600}\n'
        '{"session_id": "a", "delay": 10, "prompt_tokens": 500, "completion_tokens": 50}\n'
    )
    machine = workload_for(LoadConfig(trace=str(path))).machine(0)
    plans = []
    action = machine.start()
    while not isinstance(action, Done):
        if isinstance(action, Send):
            plans.append(action.plan)
            action = machine.answered(True)
        else:
            action = machine.waited()
    assert [(p.session, p.turn, p.keep_tokens) for p in plans] == [
        (0, 0, 0),
        (0, 1, None),  # all of the previous prompt and reply
        (0, 2, 600),  # a compacted context: 600 tokens kept
        (1, 0, 0),  # nothing cached: a new context
    ]
    assert [p.target_prompt_tokens for p in plans] == [1000, 1200, 900, 500]
    assert trace_stats(read_trace(path), 512).cache_hit_share == pytest.approx(1650 / 3600)


def test_stats_count_hits_per_block_and_kept_history(mooncake: Path) -> None:
    stats = trace_stats(read_trace(mooncake), 512)
    assert (stats.requests, stats.sessions) == (5, 4)
    assert stats.input_tokens_total == 1200 + 1800 + 700 + 1010 + 3
    assert stats.output_tokens_total == 72
    # request 2 and session s1's first turn reuse block 0; s1's second keeps 710 tokens
    hits = 512 + 512 + 710
    assert stats.cache_hit_share == pytest.approx(hits / stats.input_tokens_total)
    assert stats.turns_per_session.max == 2


def test_block_names_chain_so_only_shared_beginnings_share_ids() -> None:
    namer = BlockNamer(4)
    a = namer.ids([PromptPart(key="sys", tokens=6), PromptPart(key="x", tokens=5)])
    b = namer.ids([PromptPart(key="sys", tokens=6), PromptPart(key="y", tokens=2)])
    c = namer.ids([PromptPart(key="y", tokens=2), PromptPart(key="sys", tokens=6)])
    assert len(a) == 3 and len(b) == 2
    assert a[0] == b[0] and a[1] != b[1]  # the second block mixes in different content
    assert not set(c) & set(a + b)  # the same content after other content is other blocks


def test_a_generated_trace_replays_the_synthetic_plans(tmp_path: Path) -> None:
    cfg = LoadConfig(agents=3, min_context=2000, max_context=6000, system_prompt_tokens=100,
                     new_tokens_min=100, new_tokens_max=800, reply_tokens_min=50,
                     reply_tokens_max=200, seed=5)  # fmt: skip
    path = tmp_path / "gen.jsonl"
    write_trace(path, workload_calls(cfg, 30))
    workload = workload_for(cfg.model_copy(update={"trace": str(path)}))
    assert workload.agents == 3
    for agent in range(3):
        machine = workload.machine(agent)
        synthetic = list(islice(plan_agent(cfg, agent), 30))
        replayed = []
        action = machine.start()
        while not isinstance(action, Done):
            if isinstance(action, Send):
                replayed.append(action.plan)
                action = machine.answered(True)
            else:
                action = machine.waited()
        keys = [(p.session, p.turn, p.target_prompt_tokens, p.max_tokens) for p in replayed]
        assert keys == [
            (p.session, p.turn, p.target_prompt_tokens, p.max_tokens) for p in synthetic
        ]
        assert [p.think_s for p in replayed[:-1]] == pytest.approx(
            [p.think_s for p in synthetic[:-1]]
        )


class _TwoTokensAWord:
    """A tokenizer that spends two tokens on a word, plus a template of three."""

    async def count(self, messages: Sequence[Message]) -> int:
        return 3 + sum(2 * len(m["content"].split()) for m in messages)


async def test_a_block_is_sized_in_the_servers_tokens() -> None:
    from stallkit.loadgen.agents import _tokens_per_word

    ratio = await _tokens_per_word(_TwoTokensAWord())
    assert ratio == 2.0
    block, tail = Content("b3", 512), Content("b3", 100)
    assert len(block.words(ratio)) == 256 and block.words(ratio)[:50] == tail.words(ratio)
    assert len(block.words()) == 512


def test_stats_give_the_span_and_aiperfs_per_request_mean_beside_the_token_share(
    mooncake: Path,
) -> None:
    stats = trace_stats(read_trace(mooncake), 512)
    # arrivals: 0, 100, s1 at 50, then a delay of 40 after the line at 100; s1's second waits
    assert stats.span_s == pytest.approx(0.14)
    # AIPerf: per line with hash_ids, blocks before the first new one over its blocks:
    # [0,1,2] 0/3, [0,3,4,5] 1/4, [0,6] 1/2 (file order, sessions aside)
    assert stats.cache_hit_rate_per_request == pytest.approx((0 + 1 / 4 + 1 / 2) / 3)
    assert stats.cache_hit_share == pytest.approx(1734 / stats.input_tokens_total)


def test_per_request_mean_and_token_share_part_where_long_prompts_share_more(
    tmp_path: Path,
) -> None:
    """Ten short fresh prompts and one long prompt all of whose blocks were sent before:
    per request the mean is 1 in 11, per token most of the trace is cached."""
    lines = [
        f'{{"timestamp": {i}, "input_length": 512, "output_length": 1, "hash_ids": [{i}]}}'
        for i in range(10)
    ]
    lines.append(
        '{"timestamp": 10, "input_length": 51200, "output_length": 1, '
        f'"hash_ids": {list(range(10)) * 10}}}'
    )
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    stats = trace_stats(read_trace(path), 512)
    assert stats.cache_hit_rate_per_request == pytest.approx(1 / 11)
    assert stats.cache_hit_share > 0.9


def _words(cfg: LoadConfig) -> list[str]:
    """The words of the first replayed request's content."""
    machine = workload_for(cfg).machine(0)
    action = machine.start()
    while isinstance(action, Wait):
        action = machine.waited()
    assert isinstance(action, Send) and action.plan.content is not None
    return [w for part in action.plan.content for w in part.words()]


def test_a_traces_text_is_salted_per_trace_and_seed_and_the_same_on_a_rerun(
    tmp_path: Path,
) -> None:
    one, other = tmp_path / "one.jsonl", tmp_path / "other.jsonl"
    line = '{"timestamp": 0, "input_length": 1100, "output_length": 2, "hash_ids": [0, 1, 2]}\n'
    one.write_text(line)
    other.write_text(line + line.replace('"timestamp": 0', '"timestamp": 9'))
    first = _words(LoadConfig(trace=str(one), seed=3))
    assert len(first) == 1100
    assert _words(LoadConfig(trace=str(one), seed=3)) == first  # a rerun, or the other arm
    assert _words(LoadConfig(trace=str(one), seed=4)) != first  # another seed
    assert _words(LoadConfig(trace=str(other), seed=3))[:50] != first[:50]  # another trace
    # a salt given on purpose shares text across traces and seeds; an empty one is no salt
    shared = LoadConfig(trace=str(one), seed=3, trace_salt="fleet")
    assert _words(shared) == _words(shared.model_copy(update={"trace": str(other), "seed": 9}))
    unsalted = _words(LoadConfig(trace=str(one), trace_salt=""))
    assert unsalted[:512] == Content("b0", 512).words()  # the words of every trace before salts
    record = workload_for(LoadConfig(trace=str(one), seed=3)).replay
    assert record is not None and record.text_salt == text_salt(
        LoadConfig(seed=3), hashlib.sha256(one.read_bytes()).hexdigest()
    )


WINDOWED = [
    '{"session_id": "a", "timestamp": 1000, "input_length": 10, "output_length": 1}',
    '{"session_id": "a", "delay": 5, "input_length": 10, "output_length": 1}',
    '{"session_id": "b", "timestamp": 2000, "input_length": 10, "output_length": 1}',
    '{"session_id": "b", "delay": 5, "input_length": 10, "output_length": 1}',
    '{"session_id": "b", "timestamp": 2500, "input_length": 10, "output_length": 1}',
    '{"timestamp": 3000, "input_length": 10, "output_length": 1}',
    '{"delay": 500, "input_length": 10, "output_length": 1}',
    '{"session_id": "c", "delay": 4000, "input_length": 10, "output_length": 1}',
]


@pytest.fixture
def windowed_trace(tmp_path: Path) -> Trace:
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(WINDOWED) + "\n")
    return read_trace(path)


def test_arrivals_are_the_times_the_trace_fixes(windowed_trace: Trace) -> None:
    assert arrivals_ms(windowed_trace) == [1000, None, 2000, None, 2500, 3000, 3500, 4000]


def test_a_window_keeps_both_ends_and_a_delayed_turn_goes_with_the_one_before(
    windowed_trace: Trace,
) -> None:
    kept, zero = windowed(windowed_trace, Window(start_ms=2000, end_ms=3500))
    assert [n for n, _ in kept.mooncake] == [3, 4, 5, 6, 7]
    assert zero == 2000  # the window's start is the run's start, as AIPerf's schedule
    assert arrivals_ms(kept) == [0, None, 500, 1000, 1500]
    sessions = sessions_of(kept, 512, 1.0)
    assert [[t.line for t in s] for s in sessions] == [[3, 4, 5], [6], [7]]
    assert sessions[0][0].at_s == 0.0 and sessions[0][1].delay_s == pytest.approx(0.005)
    # a session cut by the window starts at its first kept turn
    late, _ = windowed(windowed_trace, Window(start_ms=2100))
    assert [n for n, _ in late.mooncake] == [5, 6, 7, 8]


def test_auto_offset_starts_the_run_at_the_first_request(windowed_trace: Trace) -> None:
    kept, zero = windowed(windowed_trace, Window(auto_offset=True))
    assert zero == 1000 and len(kept) == len(windowed_trace)
    assert arrivals_ms(kept) == [0, None, 1000, None, 1500, 2000, 2500, 3000]
    _, zero = windowed(windowed_trace, Window(start_ms=1500, auto_offset=True))
    assert zero == 2000
    same, zero = windowed(windowed_trace, Window())
    assert same is windowed_trace and zero == 0


def test_a_window_that_holds_no_request_is_one_error_naming_the_range(
    windowed_trace: Trace,
) -> None:
    with pytest.raises(TraceError) as caught:
        windowed(windowed_trace, Window(start_ms=5000))
    assert str(caught.value) == (
        f"the window from 5000 ms on holds none of the 8 requests of trace {windowed_trace.path}: "
        "their arrivals run from 1000 to 4000 ms"
    )
    assert "--fixed-schedule-start-offset" in caught.value.hint


def test_the_replay_record_says_what_runs(windowed_trace: Trace) -> None:
    cfg = LoadConfig(trace=windowed_trace.path, trace_start_offset_ms=2000,
                     trace_end_offset_ms=3500, trace_second_s=0.5)  # fmt: skip
    workload = workload_for(cfg)
    record = workload.replay
    assert record is not None and workload.agents == 3
    assert (record.sessions, record.requests, record.left_out) == (3, 5, 3)
    assert record.span_s == pytest.approx(1.5) and record.zero_ms == 2000
    assert record.sha256 == hashlib.sha256(Path(windowed_trace.path).read_bytes()).hexdigest()


def test_the_windows_settings_are_checked(windowed_trace: Trace) -> None:
    with pytest.raises(ValidationError, match="must not be below trace_start_offset_ms"):
        LoadConfig(trace_start_offset_ms=10, trace_end_offset_ms=9)
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        LoadConfig(trace_start_offset_ms=-1)
    assert LoadConfig(trace_start_offset_ms=10, trace_end_offset_ms=10).trace_end_offset_ms == 10


def test_the_most_requests_in_flight_at_once() -> None:
    def record(start: float, end: float) -> TurnRecord:
        return TurnRecord(
            agent=0, session=0, turn=0, attempt=0, t_start=start, t_end=end, ttft_s=None,
            chunks=[], expected_prompt_tokens=1, prompt_tokens=1, completion_tokens=1,
            cached_tokens=0, max_tokens=1, outcome="ok", error=None, status=200,
        )  # fmt: skip

    spans = [(0, 2), (1, 3), (2, 4), (2.5, 2.6), (5, 6)]
    # at 2 one ends as another starts: three at once at 2.5
    assert peak_in_flight([record(a, b) for a, b in spans]) == 3
    assert peak_in_flight([]) == 0
