"""Trace replay as the planner's source: sessions, timing, blocks, plans, stats, generation.

Pure: traces parsed from files written here, no engine."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from pathlib import Path

import pytest

from contract.trace import read_trace, write_trace
from loadgen import LoadConfig
from loadgen.agent import Done, Send, Wait
from loadgen.export import BlockNamer, workload_calls
from loadgen.records import PromptPart
from loadgen.replay import Workload, sessions_of, workload_for
from loadgen.tokens import Message
from loadgen.tracestats import trace_stats
from loadgen.workload import Content, plan_agent

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
    from loadgen.run import _tokens_per_word

    ratio = await _tokens_per_word(_TwoTokensAWord())
    assert ratio == 2.0
    block, tail = Content("b3", 512), Content("b3", 100)
    assert len(block.words(ratio)) == 256 and block.words(ratio)[:50] == tail.words(ratio)
    assert len(block.words()) == 512
