"""Deterministic synthetic text for prompts: pseudo-words drawn from a seeded random source.

The vocabulary is a fixed list of a few thousand pronounceable pseudo-words built from
syllables, so every seed gives a different word sequence and two agents' prompts diverge from
their first words (no accidental shared prefix in a prefix cache). Texts are prefix-stable: the
first n words of a seed's stream do not depend on how many words were asked for, which the
prompt sizer relies on when it searches for the length that hits a token count.
"""

from __future__ import annotations

import random
from functools import cache

_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")
_CODAS = ("", "n", "r", "s", "t", "l")


@cache
def vocabulary() -> tuple[str, ...]:
    """The fixed pseudo-word vocabulary (same on every machine and run)."""
    rng = random.Random("stallkit:vocabulary")
    words: set[str] = set()
    while len(words) < 4096:
        syllables = rng.randint(1, 3)
        word = "".join(
            rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)
        )
        words.add(word)
    return tuple(sorted(words))


def words(seed: int, count: int) -> list[str]:
    """The first ``count`` words of the stream for ``seed``."""
    rng = random.Random(f"stallkit:text:{seed}")
    return rng.choices(vocabulary(), k=count)


def text(seed: int, count: int) -> str:
    """The first ``count`` words of the stream for ``seed``, joined by single spaces."""
    return " ".join(words(seed, count))


def trace_words(key: str, count: int, salt: str = "") -> list[str]:
    """The first ``count`` words of a replayed trace's stream for content ``key`` (a block's
    or a line's) under ``salt``: another salt, other words, so that two replays that should
    not share a prefix cache never do. No salt gives the same words in every trace."""
    seed = f"stallkit:trace:{salt}:{key}" if salt else f"stallkit:trace:{key}"
    return random.Random(seed).choices(vocabulary(), k=count)
