"""The KV block pool's lookups against their definitions, over a long random history.

`match` and `split` read two sets the pool keeps up to date (hashes cached on the GPU, and
those or the host tier's); here they are compared, after every operation, with the plain
definitions over the pool's own maps (held, evictable, host tier), on a small pool whose
host tier overflows, so that every way a block comes and goes is taken many times.
"""

from __future__ import annotations

import random

import pytest

from stallkit.engine.sim.blocks import BlockPool


def _definition(pool: BlockPool, chain: list[int], limit: int) -> tuple[int, int]:
    on_gpu = set(pool._in_use) | set(pool._evictable)
    anywhere = on_gpu | set(pool._host)
    gpu = 0
    while gpu < min(len(chain), limit) and chain[gpu] in on_gpu:
        gpu += 1
    total = gpu
    if pool._host:
        while total < min(len(chain), limit) and chain[total] in anywhere:
            total += 1
    return gpu, total


def _step(
    pool: BlockPool, rng: random.Random, held: list[list[int | None]], chains: list[list[int]]
) -> None:
    """One random operation of a request: take a prefix, fill blocks, restore, or free."""
    chain = rng.choice(chains)
    op = rng.random()
    if op < 0.35:  # admit on the GPU prefix hits, plus a few new blocks that fill and register
        gpu, _ = pool.match(chain, len(chain))
        hits = chain[:gpu]
        new = rng.randint(1, 4)
        if new > pool.free_after_acquire(hits) or new > pool.num_free:
            return
        pool.acquire(hits)
        pool.allocate(new)
        blocks: list[int | None] = [*hits, *([None] * new)]
        for k in range(gpu, min(gpu + new, len(chain))):
            if pool.register(chain[k]):
                blocks[k] = chain[k]
        held.append(blocks)
    elif op < 0.55:  # a restore of the host-only part of a prefix
        gpu, total = pool.match(chain, len(chain))
        on_gpu, from_host = pool.split(chain, gpu, total)
        if not from_host or len(from_host) > pool.free_after_acquire(on_gpu):
            return
        pool.acquire(on_gpu)
        assert pool.restore(from_host)
        held.append([*on_gpu, *from_host])
    elif held:  # a request finishes or is preempted: its blocks stay cached, evictable
        pool.release(held.pop(rng.randrange(len(held))))


@pytest.mark.parametrize("host_tier", [0, 24])
def test_lookups_agree_with_their_definition_through_evictions(host_tier: int) -> None:
    rng = random.Random(5)
    pool = BlockPool(num_blocks=40, block_size=4, host_tier_blocks=host_tier)
    chains = [[hash((c, k)) for k in range(rng.randint(3, 30))] for c in range(12)]
    held: list[list[int | None]] = []
    through_host: set[int] = set()
    for _ in range(3000):
        _step(pool, rng, held, chains)
        through_host |= set(pool._host)
        for chain in chains:
            limit = rng.randint(1, len(chain))
            assert pool.match(chain, limit) == _definition(pool, chain, limit)
            gpu, total = _definition(pool, chain, len(chain))
            on_gpu, from_host = pool.split(chain, gpu, total)
            cached = set(pool._in_use) | set(pool._evictable)
            assert on_gpu == [h for h in chain[:total] if h in cached]
            assert from_host == [h for h in chain[gpu:total] if h not in cached]
            assert pool.host_only(chain, gpu, total) == len(from_host)
        # a block shared by several requests is held once
        plain = sum(1 for blocks in held for h in blocks if h is None)
        assert pool.used == plain + len(pool._in_use)
        assert pool.num_free == pool.num_blocks - pool.used
    if host_tier:  # the host tier filled and dropped its oldest blocks many times over
        assert pool.host_size == host_tier and len(through_host) > 3 * host_tier
