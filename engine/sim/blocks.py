"""The KV block pool: GPU blocks, a prefix cache of full blocks, and the host tier.

Blocks carry no identity here, only accounting: blocks held by requests, free blocks with no
cached content, and free blocks that still hold a cached full block (keyed by the hash chain of
the conversation up to and including that block), evictable in LRU order. A cached block
evicted from the GPU goes to the host tier (LMCache on-evict), itself a bounded LRU. `version`
changes whenever the set of cached hashes changes, so callers can memoise prefix lookups.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from itertools import filterfalse, islice

#: Parent hash of a conversation's first block.
ROOT_HASH = 0x5EED


def chain_hashes(tokens: Sequence[str], block_size: int, start: int, parent: int) -> list[int]:
    """Hashes of the full blocks of `tokens` from block index `start`, chained from `parent`."""
    out: list[int] = []
    as_tuple = not isinstance(tokens, tuple)
    for k in range(start, len(tokens) // block_size):
        block = tokens[k * block_size : (k + 1) * block_size]
        parent = hash((parent, tuple(block) if as_tuple else block))
        out.append(parent)
    return out


class BlockPool:
    """GPU KV blocks with a prefix cache, plus an optional host tier of evicted blocks."""

    def __init__(self, num_blocks: int, block_size: int, host_tier_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.host_tier_blocks = host_tier_blocks
        self.used = 0
        self._free_plain = num_blocks
        # free blocks that still hold a cached block: hash -> None, least recently used first
        self._evictable: OrderedDict[int, None] = OrderedDict()
        # cached blocks held by requests: hash -> reference count
        self._in_use: dict[int, int] = {}
        self._host: OrderedDict[int, None] = OrderedDict()
        # the lookups' sets: every hash cached on the GPU (held or evictable), and every hash
        # cached on the GPU or held by the host tier
        self._cached: set[int] = set()
        self._known: set[int] = set()
        self.version = 0
        #: changes on every change of the pool's state (a superset of `version`)
        self.epoch = 0

    @property
    def num_free(self) -> int:
        """Blocks an allocation may take (plain free blocks plus evictable cached ones)."""
        return self._free_plain + len(self._evictable)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by requests."""
        return self.used / self.num_blocks

    @property
    def host_size(self) -> int:
        """Blocks in the host tier."""
        return len(self._host)

    def match(self, chain: Sequence[int], max_blocks: int) -> tuple[int, int]:
        """Leading blocks of `chain` cached on the GPU, and on the GPU or in the host tier."""
        cached, known = self._cached, self._known
        limit = min(len(chain), max_blocks)
        gpu = 0
        for h in islice(chain, limit):
            if h not in cached:
                break
            gpu += 1
        total = gpu
        if self._host:
            for h in islice(chain, gpu, limit):
                if h not in known:
                    break
                total += 1
        return gpu, total

    def host_only(self, chain: Sequence[int], gpu: int, total: int) -> int:
        """Of a prefix of `total` blocks matched `gpu` deep on the GPU: how many blocks past
        `gpu` only the host tier holds (what a restore copies; `split` lists them)."""
        return total - gpu - sum(map(self._cached.__contains__, islice(chain, gpu, total)))

    def split(self, chain: Sequence[int], gpu: int, total: int) -> tuple[list[int], list[int]]:
        """Of a prefix of `total` blocks matched `gpu` deep on the GPU: its blocks cached on
        the GPU, and those past `gpu` that only the host tier holds."""
        contains = self._cached.__contains__
        tail = chain[gpu:total]
        on_gpu = [*chain[:gpu], *filter(contains, tail)]
        return on_gpu, list(filterfalse(contains, tail))

    def free_after_acquire(self, hashes: Sequence[int]) -> int:
        """Blocks free for allocation once the cached `hashes` are acquired."""
        evictable = self._evictable
        taken = sum(map(evictable.__contains__, hashes)) if evictable else 0
        return self.num_free - taken

    def acquire(self, hashes: Sequence[int]) -> None:
        """Take a reference on cached GPU blocks (a prefix cache hit)."""
        self.epoch += 1
        in_use, evictable = self._in_use, self._evictable
        for h in hashes:
            count = in_use.get(h)
            if count is None:
                del evictable[h]
                in_use[h] = 1
                self.used += 1
            else:
                in_use[h] = count + 1

    def allocate(self, count: int) -> bool:
        """Take `count` plain blocks, evicting LRU cached ones to the host tier if needed."""
        if count > self.num_free:
            return False
        self.epoch += 1
        plain = min(count, self._free_plain)
        self._free_plain -= plain
        if count > plain:
            self._evict(count - plain)
        self.used += count
        return True

    def _evict(self, count: int) -> None:
        """Evict the `count` least recently used evictable blocks: to the host tier, if there
        is one (a full host tier drops its oldest)."""
        evictable, cached, known = self._evictable, self._cached, self._known
        self.version += 1
        if not self.host_tier_blocks:
            for _ in range(count):
                evicted, _ = evictable.popitem(last=False)
                cached.discard(evicted)
                known.discard(evicted)
            return
        host, cap = self._host, self.host_tier_blocks
        for _ in range(count):
            evicted, _ = evictable.popitem(last=False)
            cached.discard(evicted)
            host[evicted] = None
            host.move_to_end(evicted)
            if len(host) > cap:
                dropped, _ = host.popitem(last=False)
                if dropped not in cached:
                    known.discard(dropped)

    def register(self, block_hash: int) -> bool:
        """Cache a held plain block that just became full; False if that hash is cached already."""
        if block_hash in self._cached:
            return False
        self._in_use[block_hash] = 1
        self._cached.add(block_hash)
        self._known.add(block_hash)
        self.version += 1
        self.epoch += 1
        return True

    def restore(self, hashes: Sequence[int]) -> bool:
        """Copy blocks from the host tier into newly allocated GPU blocks, held and cached."""
        if not self.allocate(len(hashes)):
            return False
        in_use, host = self._in_use, self._host
        for h in hashes:
            in_use[h] = in_use.get(h, 0) + 1
            if h in host:
                host.move_to_end(h)
        self._cached.update(hashes)
        self._known.update(hashes)
        self.version += 1
        return True

    def release(self, hashes: Sequence[int | None]) -> None:
        """Free a request's blocks; cached ones stay cached and evictable, tail blocks first."""
        self.epoch += 1
        in_use, evictable = self._in_use, self._evictable
        freed = 0
        for h in reversed(hashes):
            if h is None:
                self._free_plain += 1
                freed += 1
                continue
            count = in_use[h] - 1
            if count:  # another request still holds it (a shared prefix): still in use
                in_use[h] = count
            else:
                del in_use[h]
                evictable[h] = None
                freed += 1
        self.used -= freed
