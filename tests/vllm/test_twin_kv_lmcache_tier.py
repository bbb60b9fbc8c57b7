"""The host tier the twin gives LMCache's connector (pure): chunk names chained over the
prefix, lookups of the longest stored run, LRU eviction that spares pinned chunks."""

from __future__ import annotations

from stallkit.engine.twin.kv.lmcache_tier import HostTier


def test_a_lookup_counts_the_stored_run_from_the_start_and_a_prefix_names_its_chunks() -> None:
    tier = HostTier(capacity=8, chunk_tokens=4)
    assert tier.store(list(range(10))) == 10  # two full chunks and a partial one
    assert tier.lookup(list(range(8))) == 8
    assert tier.lookup([*range(8), 99, 98]) == 8  # the partial tail differs
    assert tier.lookup([7, *range(1, 10)]) == 0  # same later tokens, other prefix
    assert tier.store(list(range(12)), skip_tokens=9) == 4  # only the chunk from 8 is new


def test_eviction_takes_the_least_recently_used_unpinned_chunk() -> None:
    tier = HostTier(capacity=2, chunk_tokens=2)
    tier.store([1, 2])
    tier.store([3, 4])
    assert tier.lookup([1, 2], lookup_id="r1") == 2  # used and pinned: [3, 4] is oldest
    tier.store([5, 6])
    assert (tier.lookup([3, 4]), tier.lookup([5, 6]), tier.evicted) == (0, 2, 1)
    assert tier.store([7, 8]) == 2  # evicts [5, 6]: [1, 2] is pinned
    assert tier.lookup([1, 2]) == 2 and tier.lookup([5, 6]) == 0
    tier.unpin("r1")
    tier.lookup([7, 8])
    assert tier.store([9, 10]) == 2 and tier.lookup([1, 2]) == 0 and tier.pinned == 0


def test_a_store_with_no_room_is_refused() -> None:
    tier = HostTier(capacity=1, chunk_tokens=2)
    tier.store([1, 2])
    tier.lookup([1, 2], lookup_id="r1")
    assert tier.store([3, 4]) == 0 and tier.refused == 1 and len(tier) == 1
