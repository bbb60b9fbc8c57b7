"""The workload model is pure and seeded: same seed same requests, bounded growing contexts."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from stallkit.loadgen import text
from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.workload import TurnPlan, plan_agent, start_offset_s


def _plans(cfg: LoadConfig, agent: int, n: int = 200) -> list[TurnPlan]:
    return list(itertools.islice(plan_agent(cfg, agent), n))


def test_same_seed_gives_the_same_requests() -> None:
    cfg = LoadConfig(seed=7)
    for agent in range(3):
        assert _plans(cfg, agent) == _plans(LoadConfig(seed=7), agent)
    assert [start_offset_s(cfg, a) for a in range(12)] == [
        start_offset_s(LoadConfig(seed=7), a) for a in range(12)
    ]


def test_different_seeds_and_agents_differ() -> None:
    assert _plans(LoadConfig(seed=1), 0) != _plans(LoadConfig(seed=2), 0)
    assert _plans(LoadConfig(seed=1), 0) != _plans(LoadConfig(seed=1), 1)


def test_contexts_stay_in_bounds_and_grow_within_a_session() -> None:
    cfg = LoadConfig(seed=3)
    plans = _plans(cfg, 0, 500)
    for plan in plans:
        assert cfg.min_context <= plan.target_prompt_tokens
        assert plan.target_prompt_tokens + plan.max_tokens <= cfg.max_context
        assert cfg.reply_tokens_min <= plan.max_tokens <= cfg.reply_tokens_max
        assert cfg.think_min_s <= plan.think_s <= cfg.think_max_s
    for prev, cur in itertools.pairwise(plans):
        if cur.session == prev.session:
            assert cur.turn == prev.turn + 1
            grown = cur.target_prompt_tokens - prev.target_prompt_tokens - prev.max_tokens
            assert cfg.new_tokens_min <= grown <= cfg.new_tokens_max
        else:
            assert (cur.session, cur.turn) == (prev.session + 1, 0)


def test_sessions_restart_near_the_lower_bound_when_the_next_turn_would_not_fit() -> None:
    cfg = LoadConfig(seed=5)
    plans = _plans(cfg, 2, 500)
    spread = int((cfg.max_context - cfg.min_context) * cfg.restart_spread)
    starts = [p for p in plans if p.turn == 0]
    assert len(starts) > 5  # sessions do restart
    for plan in starts:
        assert plan.target_prompt_tokens <= cfg.min_context + spread
    # the last turn of each session leaves less room than one more turn could need
    for prev, cur in itertools.pairwise(plans):
        if cur.turn == 0:
            room = cfg.max_context - prev.target_prompt_tokens - prev.max_tokens
            assert room < cfg.new_tokens_max + cfg.reply_tokens_max


def test_system_prompts_are_shared_only_when_asked() -> None:
    distinct = LoadConfig(seed=1)
    assert _plans(distinct, 0, 1)[0].system_seed != _plans(distinct, 1, 1)[0].system_seed
    shared = LoadConfig(seed=1, shared_system_prompt=True)
    seeds = {p.system_seed for a in range(4) for p in _plans(shared, a, 50)}
    assert len(seeds) == 1


def test_agents_start_staggered() -> None:
    cfg = LoadConfig(stagger_s=2.0)
    offsets = [start_offset_s(cfg, a) for a in range(12)]
    assert offsets == sorted(offsets)
    assert all(b - a > 0 for a, b in itertools.pairwise(offsets))
    assert offsets[-1] >= 11 * 2.0


def test_text_is_deterministic_prefix_stable_and_varied() -> None:
    assert text.words(9, 50) == text.words(9, 500)[:50]
    assert text.text(9, 20) == text.text(9, 20)
    assert text.words(9, 5) != text.words(10, 5)
    assert len(set(text.words(1, 1000))) > 500


@pytest.mark.parametrize(
    "bad",
    [
        {"min_context": 5000, "max_context": 4000},
        {"reply_tokens_min": 10, "reply_tokens_max": 5},
        {"min_context": 2000, "max_context": 3000, "new_tokens_max": 900, "reply_tokens_max": 200},
        {"system_prompt_tokens": 50_000},
        {"agents": 0},
        {"unknown_field": 1},
    ],
)
def test_config_rejects_inconsistent_values(bad: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        LoadConfig.model_validate(bad)
