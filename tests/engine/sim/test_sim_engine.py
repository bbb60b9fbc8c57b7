"""The simulator core: preemption, prefix cache, host tier, restores, aborts, counters.

Small pools (blocks of 4 tokens) and engine time passed in; no sleeps.
"""

from __future__ import annotations

import logging
import zlib

import pytest

from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.core import VOCABULARY, SimEngine, SimRequestError, output_words
from stallkit.engine.sim.trace import prepare


def words(tag: str, count: int) -> list[str]:
    return [f"{tag}{i}" for i in range(count)]


class Driver:
    """Steps an engine on a fake clock, collecting each request's output words."""

    def __init__(self, **config: object) -> None:
        self.engine = SimEngine(SimConfig.model_validate({"block_size": 4, **config}))
        self.now = 0.0
        self.outputs: dict[str, list[str]] = {}
        self.finished: dict[str, str] = {}

    def step(self) -> None:
        result = self.engine.step(self.now)
        self.now += result.duration_s
        for request_id, new in result.outputs.items():
            self.outputs.setdefault(request_id, []).extend(new)
        self.finished.update(result.finished)

    def drain(self, limit: int = 10_000) -> None:
        for _ in range(limit):
            if not self.engine.has_work():
                return
            self.step()
        raise AssertionError("engine did not drain")

    def state(self, request_id: str) -> str:
        info = self.engine.request_info(request_id)
        assert info is not None
        return info.state


def test_a_request_runs_to_max_tokens_with_deterministic_words() -> None:
    d = Driver(num_blocks=8, max_num_seqs=2)
    d.engine.add_request("r1", words("p", 10), 5, d.now)
    d.drain()
    assert d.finished == {"r1": "length"}
    assert len(d.outputs["r1"]) == 5
    info = d.engine.request_info("r1")
    assert info is not None and info.state == "finished" and info.output_tokens == 5
    assert info.first_token_s is not None and info.finished_s is not None
    assert info.first_token_s < info.finished_s
    other = Driver(num_blocks=8, max_num_seqs=2)
    other.engine.add_request("r1", words("q", 7), 5, 0.0)
    other.drain()
    assert other.outputs["r1"] == d.outputs["r1"]  # words depend on the request id only
    stats = d.engine.stats
    assert stats.generation_tokens == 5 and stats.request_success == {"length": 1}
    assert stats.prompt_tokens == 10
    assert stats.iteration_tokens.count == stats.steps - stats.empty_steps


def test_preemption_frees_the_newest_requests_blocks_and_requeues_it_at_the_head() -> None:
    # share off: every step is the uncontended running pass, which may preempt; no host tier,
    # so the victim comes back as a plain request (not a restore that may be skipped)
    d = Driver(num_blocks=6, max_num_seqs=2, prefill_compute_share=0, host_tier_blocks=0)
    d.engine.add_request("old", words("a", 8), 12, d.now)
    d.engine.add_request("new", words("b", 8), 12, d.now)
    d.engine.add_request("later", words("c", 8), 4, d.now)
    while d.engine.stats.num_preemptions == 0:
        assert d.engine.stats.kv_usage <= 1.0
        d.step()
    stats = d.engine.stats
    assert stats.num_preemptions == 1
    assert d.state("old") == "running" and d.state("new") == "waiting"
    assert stats.kv_usage == pytest.approx(4 / 6)  # only the survivor's blocks are held
    assert stats.num_running == 1 and stats.num_waiting == 2
    hits_before = stats.prefix_cache_hits
    while d.engine.has_work():
        # requeued at the head: the request queued behind it never overtakes it
        states = {rid: d.state(rid) for rid in ("new", "later") if rid not in d.finished}
        assert states.get("later") != "running" or states.get("new") != "waiting"
        d.step()
    new = d.engine.request_info("new")
    assert new is not None and new.num_preemptions == 1 and d.finished["new"] == "length"
    assert d.engine.stats.prefix_cache_hits > hits_before  # its cached blocks were reused


def test_a_conversations_second_turn_hits_the_prefix_cache() -> None:
    d = Driver(num_blocks=16)
    first = words("turn1-", 10)
    d.engine.add_request("t1", first, 5, d.now)
    d.drain()
    # prompt + reply (15 tokens, 14 computed) -> 3 full cached blocks = 12 tokens
    second = [*first, *d.outputs["t1"], *words("turn2-", 3)]
    queries_before = d.engine.stats.prefix_cache_queries
    d.engine.add_request("t2", second, 2, d.now)
    d.drain()
    info = d.engine.request_info("t2")
    assert info is not None and info.cached_prompt_tokens == 12
    stats = d.engine.stats
    assert stats.prefix_cache_queries - queries_before == len(second)
    assert stats.prompt_tokens_by_source["local_cache_hit"] == 12
    assert stats.prompt_tokens_cached == 12
    # a different conversation with the same words but another first block shares nothing
    d.engine.add_request("x", ["other", *second[1:]], 1, d.now)
    d.drain()
    other = d.engine.request_info("x")
    assert other is not None and other.cached_prompt_tokens == 0


def test_evicted_blocks_go_to_the_host_tier_and_come_back_by_restore() -> None:
    d = Driver(num_blocks=4, host_tier_blocks=16)
    first = words("x", 8)
    d.engine.add_request("x1", first, 1, d.now)
    d.drain()
    d.engine.add_request("filler", words("y", 15), 1, d.now)  # takes all four blocks
    d.drain()
    second = [*first, *d.outputs["x1"], *words("z", 3)]
    d.engine.add_request("x2", second, 1, d.now)
    d.drain()
    stats = d.engine.stats
    assert stats.restores_done == 1 and stats.restores_recomputed == 0
    assert stats.external_prefix_cache_hits == 8
    assert stats.prompt_tokens_by_source["external_kv_transfer"] == 8
    info = d.engine.request_info("x2")
    assert info is not None and info.cached_prompt_tokens == 8


def test_without_a_host_tier_evicted_blocks_are_recomputed() -> None:
    d = Driver(num_blocks=4, host_tier_blocks=0)
    first = words("x", 8)
    d.engine.add_request("x1", first, 1, d.now)
    d.drain()
    d.engine.add_request("filler", words("y", 15), 1, d.now)
    d.drain()
    d.engine.add_request("x2", [*first, *d.outputs["x1"], "z"], 1, d.now)
    d.drain()
    assert d.engine.stats.restores_done == 0
    info = d.engine.request_info("x2")
    assert info is not None and info.cached_prompt_tokens == 0


def test_a_restore_past_max_wait_is_recomputed_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    d = Driver(num_blocks=8, max_num_seqs=1, host_tier_blocks=32, restore_max_wait_s=0.02)
    first = words("x", 8)
    d.engine.add_request("x1", first, 1, d.now)
    d.drain()
    d.engine.add_request("filler", words("y", 30), 1, d.now)  # evicts x1's blocks to host
    d.drain()
    d.engine.add_request("long", words("z", 5), 20, d.now)  # holds the only running slot
    d.step()
    d.engine.add_request("x2", [*first, *d.outputs["x1"], *words("n", 3)], 1, d.now)
    d.step()
    assert d.engine.stats.waiting_by_reason == {"capacity": 0, "deferred": 1}
    with caplog.at_level(logging.WARNING, logger="stallkit.engine.sim"):
        d.drain()
    stats = d.engine.stats
    assert stats.restores_recomputed == 1 and stats.restores_done == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "x2" in warnings[0] and "restore" in warnings[0] and "max wait" in warnings[0]
    info = d.engine.request_info("x2")
    assert info is not None and info.cached_prompt_tokens == 0


def test_abort_frees_a_running_request_and_counts_it() -> None:
    d = Driver(num_blocks=8)
    d.engine.add_request("r", words("p", 10), 50, d.now)
    d.step()
    assert d.engine.stats.kv_usage > 0
    d.engine.abort("r", d.now)
    d.engine.abort("unknown", d.now)
    assert d.engine.stats.kv_usage == 0 and not d.engine.has_work()
    assert d.engine.stats.request_success == {"abort": 1}
    result = d.engine.step(d.now)
    assert result.finished == {"r": "abort"} and not result.gpu_busy
    info = d.engine.request_info("r")
    assert info is not None and info.finish_reason == "abort"


def test_bad_requests_raise_engine_errors() -> None:
    engine = SimEngine(SimConfig(block_size=4, num_blocks=8, max_model_len=20))
    with pytest.raises(SimRequestError, match="empty prompt"):
        engine.add_request("a", [], 5, 0.0)
    with pytest.raises(SimRequestError, match="too long"):
        engine.add_request("a", words("p", 21), 5, 0.0)
    with pytest.raises(SimRequestError, match="max_tokens"):
        engine.add_request("a", words("p", 3), 0, 0.0)
    engine.add_request("a", words("p", 3), 5, 0.0)
    with pytest.raises(SimRequestError, match="already in use"):
        engine.add_request("a", words("p", 3), 5, 0.0)


def test_an_idle_step_costs_an_idle_tick_and_records_nothing() -> None:
    engine = SimEngine(SimConfig(idle_tick_s=0.05))
    result = engine.step(0.0)
    assert result.duration_s == 0.05 and not result.gpu_busy and result.scheduled_tokens == 0
    assert engine.stats.iteration_tokens.count == 0 and engine.stats.empty_steps == 1


def test_advance_schedules_exactly_like_step() -> None:
    def build() -> SimEngine:
        engine = SimEngine(SimConfig(block_size=4, num_blocks=12, max_num_seqs=2))
        for i in range(4):
            engine.add_request(f"r{i}", words(f"p{i}-", 9 + i), 6 + i, 0.0)
        return engine

    stepped, advanced = build(), build()
    now = 0.0
    while stepped.has_work():
        now += stepped.step(now).duration_s
    later, finished = 0.0, {}
    while advanced.has_work():
        result = advanced.advance(later, 1e9)
        later = result.now_s
        finished.update(result.finished)
    assert later == pytest.approx(now)
    assert finished == {f"r{i}": "length" for i in range(4)}
    assert advanced.stats.generation_tokens == stepped.stats.generation_tokens
    assert advanced.stats.num_preemptions == stepped.stats.num_preemptions


def _second_turn(hint: str | None, second_words: str = "turn2-") -> tuple[int, int]:
    """Cached tokens and prefix-cache hits of a conversation's second turn, with a hint."""
    d = Driver(num_blocks=32)
    first = words("turn1-", 10)
    d.engine.add_request("t1", first, 5, d.now)
    d.drain()
    assert d.engine.output_tokens("t1") == 5
    second = [*first, *d.outputs["t1"], *words(second_words, 9)]
    if hint == "other":
        d.engine.add_request("o", words("other-", 12), 1, d.now)
        d.drain()
    d.engine.add_request("t2", second, 2, d.now, continues=hint and {"other": "o"}.get(hint, hint))
    assert d.engine.output_tokens("t2") == 0
    d.drain()
    info = d.engine.request_info("t2")
    assert info is not None
    # the blocks hashed for the second turn are registered: a third turn hits them all
    third = [*second, *d.outputs["t2"], "x"]
    d.engine.add_request("t3", third, 1, d.now)
    d.drain()
    again = d.engine.request_info("t3")
    assert again is not None
    return info.cached_prompt_tokens, again.cached_prompt_tokens


def test_a_prompt_that_continues_a_finished_request_reuses_its_hashes_with_the_same_hits() -> None:
    plain = _second_turn(None)
    assert plain == (12, 24)
    assert _second_turn("t1") == plain
    # a hint that names a request the prompt does not continue, or an unknown one, is ignored
    assert _second_turn("other") == plain
    assert _second_turn("nobody") == plain
    assert Driver().engine.output_tokens("nobody") is None


def test_a_livelocked_engine_polls_its_restores_every_step_until_the_max_wait_expires() -> None:
    # the livelock repeats one waiting pass thousands of times (the engine replays it): the
    # counters must move every step as if it were run, and the max wait must still expire
    engine, now = prepare("base", "full-slots")
    first_poll: float | None = None
    switched = False
    queries = engine.stats.prefix_cache_queries
    for _ in range(3200):
        start = now
        result = engine.step(now)
        now += result.duration_s
        stats = engine.stats
        polled, queried = result.restores_polled, stats.prefix_cache_queries - queries
        queries = stats.prefix_cache_queries
        if first_poll is None:
            first_poll = start
        if not switched and start - first_poll >= 60.0:  # restore_max_wait_s
            switched = True
            assert (polled, stats.waiting_by_reason["deferred"]) == (1, 1)
        elif switched:  # the first one now recomputes, cannot be admitted, and holds the queue
            assert (result.scheduled_tokens, polled, queried) == (0, 0, 53)
        elif result.scheduled_tokens == 0:
            assert (polled, queried, stats.waiting_by_reason["deferred"]) == (2, 106, 2)
    assert switched and stats.num_running == 2 and stats.restores_recomputed == 0


def test_output_words_are_the_stride_seven_walk_from_the_ids_crc() -> None:
    # the words are drawn from repeated cycles of the walk: any start and length, any id
    for rid in ("r1", "a0-s1-t2-0", "x" * 40):
        base = zlib.crc32(rid.encode())
        for start, count in ((0, 0), (0, 1), (57, 2), (58, 59), (1000, 896), (3, 2000)):
            walk = [
                VOCABULARY[(base + 7 * k) % len(VOCABULARY)] for k in range(start, start + count)
            ]
            assert output_words(rid, start, count) == walk
