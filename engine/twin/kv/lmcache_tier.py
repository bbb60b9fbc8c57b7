"""The host tier LMCache's connector reads and writes in the twin: chunks of tokens, LRU.

LMCache keeps KV in chunks of `chunk_tokens` tokens, each named by a hash chained over the
prompt's tokens up to its end (so a chunk hits only under the same prefix), and a lookup
counts the tokens of the longest run of stored chunks from the prompt's start. A real
engine's LMCache holds them in its worker's storage backends; the twin holds their names in
`HostTier`: at most `capacity` chunks, the least recently used one evicted first, none that a
lookup pinned for a request about to load it (LMCache's `lookup(pin=True)`). Pure: no vLLM or
lmcache import, no time.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["HostTier"]


class HostTier:
    """Chunk names in LRU order, `capacity` at most; pins per lookup id."""

    def __init__(self, capacity: int, chunk_tokens: int) -> None:
        self.capacity = max(1, capacity)
        self.chunk_tokens = max(1, chunk_tokens)
        self._chunks: OrderedDict[bytes, int] = OrderedDict()  # name -> pins
        self._pins: dict[str, list[bytes]] = {}
        #: chunks stored and evicted since the start; stores refused for want of room
        self.stored = 0
        self.evicted = 0
        self.refused = 0

    def names(self, tokens: Sequence[int]) -> list[tuple[bytes, int]]:
        """Each chunk of `tokens` (the last may be partial): its name and where it ends."""
        out: list[tuple[bytes, int]] = []
        name = b""
        for start in range(0, len(tokens), self.chunk_tokens):
            end = min(start + self.chunk_tokens, len(tokens))
            name = hashlib.sha256(name + array("q", tokens[start:end]).tobytes()).digest()
            out.append((name, end))
        return out

    def lookup(self, tokens: Sequence[int], lookup_id: str | None = None) -> int:
        """Tokens of the longest run of stored chunks from the start of `tokens`; with a
        `lookup_id`, those chunks are pinned for it (replacing what it pinned before)."""
        if lookup_id is not None:
            self.unpin(lookup_id)
        hit: list[bytes] = []
        tokens_hit = 0
        for name, end in self.names(tokens):
            if name not in self._chunks:
                break
            self._chunks.move_to_end(name)
            hit.append(name)
            tokens_hit = end
        if lookup_id is not None and hit:
            for name in hit:
                self._chunks[name] += 1
            self._pins[lookup_id] = hit
        return tokens_hit

    def unpin(self, lookup_id: str) -> None:
        """Release what a lookup pinned (its load is done, or its request is gone)."""
        for name in self._pins.pop(lookup_id, ()):
            if name in self._chunks:
                self._chunks[name] -= 1

    def store(self, tokens: Sequence[int], skip_tokens: int = 0) -> int:
        """Store the chunks of `tokens` that start at or after `skip_tokens` (rounded down to a
        chunk) and are not stored yet, evicting unpinned ones as needed; the tokens stored.
        A chunk that finds no room is not stored, nor is any after it (LMCache skips a store
        its allocator cannot take)."""
        first = skip_tokens // self.chunk_tokens * self.chunk_tokens
        stored_tokens = 0
        start = 0
        for name, end in self.names(tokens):
            begin, start = start, end
            if begin < first:
                continue
            if name in self._chunks:
                self._chunks.move_to_end(name)
                continue
            if len(self._chunks) >= self.capacity and not self._evict():
                self.refused += 1
                break
            self._chunks[name] = 0
            self.stored += 1
            stored_tokens += end - begin
        return stored_tokens

    def _evict(self) -> bool:
        """Drop the least recently used unpinned chunk; whether there was one."""
        for name, pins in self._chunks.items():
            if pins <= 0:
                del self._chunks[name]
                self.evicted += 1
                return True
        return False

    def __len__(self) -> int:
        return len(self._chunks)

    @property
    def pinned(self) -> int:
        """Lookups holding pins."""
        return len(self._pins)
