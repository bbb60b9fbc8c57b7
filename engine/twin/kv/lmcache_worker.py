"""LMCacheConnectorV1 in the twin: LMCache's scheduler half real, its worker simulated.

vLLM's `LMCacheConnectorV1` wraps lmcache's `LMCacheConnectorV1Impl`; its scheduler half (the
hit arithmetic, the load and save specs of `build_connector_meta`) runs as shipped. What it
asks of the cache goes through its lookup client, which on a real engine asks the worker's
`LMCacheEngine` over ZMQ: here `TierLookupClient` answers from the twin's `HostTier`, unless
the kit turns on `lmcache.enable_scheduler_bypass_lookup`, where lmcache's own bypass client
stays (the one LMCache PR #3014's bug class lives in). `LMCacheWorkerSim` stands in for the
worker-role connector the driver calls: it reads the metadata's `load_spec`s (LMCache loads
synchronously, before the forward: the step waits for them on the load link) and `save_spec`s
(chunks stored into the tier over the store link; the next step starts once they are done, as
`wait_for_save` holds a real engine). Imports lmcache and vLLM.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from lmcache.v1.lookup_client.abstract_client import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
    LookupClientInterface,
)

from stallkit.engine.twin.kv.faults import LoadFaults
from stallkit.engine.twin.kv.link import TwoLinks
from stallkit.engine.twin.kv.lmcache_config import route_lmcache_logging
from stallkit.engine.twin.kv.lmcache_tier import HostTier

__all__ = ["LMCacheWorkerSim", "TierLookupClient", "attach_lmcache", "bypasses_lookup"]


class TierLookupClient(LookupClientInterface):  # type: ignore[misc]
    """A synchronous lookup client over the twin's host tier (LMCacheLookupClient's rules:
    a result is kept per request until the scheduler clears it after allocating)."""

    def __init__(self, tier: HostTier) -> None:
        self.tier = tier
        self._status: dict[str, int] = {}

    def lookup_cache(self, lookup_id: str) -> int | None:
        return self._status.get(lookup_id, -1)

    def lookup(
        self,
        token_ids: torch.Tensor | list[int],
        lookup_id: str,
        request_configs: dict[Any, Any] | None = None,
    ) -> int | None:
        tokens = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else list(token_ids)
        hit = self.tier.lookup(tokens, lookup_id)
        self._status[lookup_id] = hit
        return hit

    def clear_lookup_status(self, lookup_id: str) -> None:
        self._status.pop(lookup_id, None)

    def supports_producer_reuse(self) -> bool:
        return True

    def close(self) -> None:
        self._status.clear()


class LMCacheWorkerSim(TwoLinks):
    """The worker-role connector's calls the twin's driver makes, from LMCache's metadata."""

    def __init__(
        self, tier: HostTier, block_size: int, latency_s: float, seconds_per_block: float,
        faults: LoadFaults,
    ) -> None:  # fmt: skip
        self.tier, self.block_size, self.faults = tier, block_size, faults
        self._open_links(latency_s, seconds_per_block)
        #: engine time now, and the latest time the step has to wait for (set by the driver)
        self.now_s = 0.0
        self.wait_until_s = 0.0
        #: loads made (requests restored from the tier), tokens loaded, store transfers
        self.loads = 0
        self.loaded_tokens = 0
        self.stores = 0
        self._meta: Any = None
        self._saved_s = 0.0  # when the last store is done

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    # -- the calls KvDriver makes on a worker-role connector ----------------------------------
    def handle_preemptions(self, meta: Any) -> None:
        """The last step's stores hold this one back (a real `wait_for_save` blocks)."""
        self.wait_until_s = max(self.wait_until_s, self._saved_s)

    def bind_connector_metadata(self, meta: Any) -> None:
        self._meta = meta

    def start_load_kv(self, forward_context: Any) -> None:
        """Synchronous loads: each on the load link, the step waits for the last."""
        for req in self._meta.requests:
            spec = req.load_spec
            if spec is not None and spec.can_load:
                self._load(req, spec)
            self.tier.unpin(req.req_id)

    def _load(self, req: Any, spec: Any) -> None:
        chunk = self.tier.chunk_tokens
        first = spec.vllm_cached_tokens // chunk * chunk  # LMCache reads whole chunks
        tokens = max(0, spec.lmcache_cached_tokens - first)
        transfer = self.load_link.submit(self.loads, self._blocks(tokens), self.now_s)
        self.wait_until_s = max(self.wait_until_s, transfer.done_s)
        slots = req.slot_mapping[spec.vllm_cached_tokens : spec.lmcache_cached_tokens]
        blocks = sorted({int(s) // self.block_size for s in slots.tolist()})
        self.faults.on_load(transfer.done_s, blocks)
        self.loads += 1
        self.loaded_tokens += spec.lmcache_cached_tokens - spec.vllm_cached_tokens

    def wait_for_save(self) -> None:
        """Stores of the step's save specs: new chunks into the tier, their bytes on the link."""
        for req in self._meta.requests:
            spec = req.save_spec
            if spec is None or not spec.can_save:
                continue
            tokens = self.tier.store(req.token_ids, spec.skip_leading_tokens)
            if tokens:
                transfer = self.store_link.submit(self.stores, self._blocks(tokens), self.now_s)
                self._saved_s = transfer.done_s
                self.stores += 1

    def get_transfer_results(self, finished_req_ids: set[str]) -> Any:
        for rid in finished_req_ids:  # a request gone before its load releases its pins
            self.tier.unpin(rid)
        self.store_link.finished(self.now_s)
        self.load_link.finished(self.now_s)
        return SimpleNamespace(finished_sending=None, finished_recving=None, failed_recving=None)

    def get_block_ids_with_load_errors(self) -> set[int]:
        return set()

    def get_kv_connector_stats(self) -> None:
        return None

    def get_kv_connector_kv_cache_events(self) -> None:
        return None

    def build_connector_worker_meta(self) -> None:
        return None

    def clear_connector_metadata(self) -> None:
        self._meta = None

    # -- what the driver asks of a mover ---------------------------------------------------


def bypasses_lookup(connector: Any) -> bool:
    """Whether the kit turned on LMCache's scheduler bypass lookup (its own client stays)."""
    return bool(connector._lmcache_engine.config.enable_scheduler_bypass_lookup)


def attach_lmcache(
    connector: Any, host_blocks: int, latency_s: float, seconds_per_block: float,
    faults: LoadFaults,
) -> LMCacheWorkerSim:  # fmt: skip
    """The worker half for the scheduler's LMCacheConnectorV1, and its lookup client.

    The one seam: the lookup client of lmcache's manager answers from the twin's tier (the
    ZMQ client lmcache built is closed unused), except under the bypass lookup.
    """
    route_lmcache_logging()
    impl = connector._lmcache_engine
    block_size = int(impl._block_size)
    chunk = int(impl._lmcache_chunk_size)
    tier = HostTier(host_blocks // max(1, -(-chunk // block_size)), chunk)
    if not bypasses_lookup(connector):
        manager = impl._manager
        if manager._lookup_client is not None:
            manager._lookup_client.close()
        manager._lookup_client = TierLookupClient(tier)
    return LMCacheWorkerSim(tier, block_size, latency_s, seconds_per_block, faults)
