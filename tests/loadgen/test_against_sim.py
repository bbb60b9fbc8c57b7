"""Agents against the simulated engine on port 0: exact prompt sizes and prefix-cache reuse."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from stallkit.contract.summary import summarize
from stallkit.loadgen.agents import RunFinished, run_agents
from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.preflight import preflight
from stallkit.loadgen.records import read_records

pytestmark = pytest.mark.wallclock

SIM = {"policy": "fix", "time_scale": 200.0, "block_size": 16, "num_blocks": 8000}


async def test_twelve_agents_get_exact_prompts_and_cache_hits(
    sim_server: Any, tmp_path: Path
) -> None:
    cfg = LoadConfig(
        agents=12,
        min_context=2000,
        max_context=6000,
        system_prompt_tokens=200,
        new_tokens_min=100,
        new_tokens_max=600,
        reply_tokens_min=20,
        reply_tokens_max=100,
        think_min_s=0.0,
        think_max_s=0.05,
        stagger_s=0.02,
        max_turns=3,
        duration_s=120,
        read_timeout_s=60,
        seed=4,
    )
    async with sim_server(**SIM) as url:
        info = await preflight(url, cfg)
        assert info.tokenize == "server" and info.additive and info.max_model_len == 131072
        async with contextlib.aclosing(run_agents(info, cfg, tmp_path)) as events:
            last = [event async for event in events][-1]
    assert isinstance(last, RunFinished) and last.reason == "done"
    records = read_records(tmp_path)
    assert len(records) == 36 and {r.outcome for r in records} == {"ok"}
    for r in records:
        assert r.prompt_tokens == r.expected_prompt_tokens  # server usage equals our count
        assert r.completion_tokens == r.max_tokens == r.streamed_tokens
        assert r.ttft_s is not None and r.chunks
    follow_ups = [r for r in records if r.turn > 0]
    assert follow_ups
    for r in follow_ups:
        assert r.cached_tokens is not None and 0 < r.cached_tokens < (r.prompt_tokens or 0)
    summary = summarize(records)
    assert summary.cached_prompt_pct is not None and summary.cached_prompt_pct > 0
    assert summary.prompt_size_mismatches == 0
