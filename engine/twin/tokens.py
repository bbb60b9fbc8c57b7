"""The twin's tokens: one word of the agents' text is one token id, the same id every time.

A real engine tokenizes a conversation's next turn into the same ids as the turn before plus
the reply plus the new text, which is what makes its prefix cache hit. The twin gets the same
effect from a fixed map: a word's id is a hash of the word, so the same words give the same
ids (and block hashes) in any process, on any machine. Two distinct words may share an id (a
2^24 range), which would make two different prompts look alike to the prefix cache; the
agents' words come from a pool of 400,000, so that is rare, and deterministic when it happens.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

#: the ids the map uses start here (below: ids a tokenizer reserves for special tokens)
FIRST_ID = 1000
_RANGE = 1 << 24


class TokenMap:
    """Word -> token id, memoised (an agent's vocabulary is small; its prompts are long)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def id_of(self, word: str) -> int:
        token = self._ids.get(word)
        if token is None:
            token = FIRST_ID + zlib.crc32(word.encode()) % _RANGE
            self._ids[word] = token
        return token

    def ids(self, words: Sequence[str]) -> list[int]:
        """The ids of `words`, in order. A prompt is up to 100K words every turn, nearly all
        seen before (the conversation so far): one C-level pass looks them all up, then only
        the words from the first new one on are looked at one by one."""
        ids: list[int | None] = list(map(self._ids.get, words))
        if None in ids:
            for i in range(ids.index(None), len(ids)):
                if ids[i] is None:
                    ids[i] = self.id_of(words[i])
        return ids  # type: ignore[return-value]  # no None is left
