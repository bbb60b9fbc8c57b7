"""Prompt sizing: exact targets, incremental counting of long conversations, and fallbacks."""

from __future__ import annotations

from collections.abc import Sequence

from stallkit.loadgen import text
from stallkit.loadgen.tokens import Message, PromptSizer, check_additivity


class WordCounter:
    """The simulator's template: a role marker per message, a word per token, a final marker."""

    def __init__(self) -> None:
        self.calls = 0
        self.tokens_seen = 0

    async def count(self, messages: Sequence[Message]) -> int:
        total = sum(1 + len(m["content"].split()) for m in messages) + 1
        self.calls += 1
        self.tokens_seen += total
        return total


class SubwordCounter(WordCounter):
    """A tokenizer that splits words into pieces of up to three letters."""

    async def count(self, messages: Sequence[Message]) -> int:
        self.calls += 1
        pieces = sum(-(-len(w) // 3) for m in messages for w in m["content"].split())
        return pieces + 3 * len(messages) + 2


class PositionalCounter(WordCounter):
    """A template that numbers messages, so counts are not additive."""

    async def count(self, messages: Sequence[Message]) -> int:
        return await super().count(messages) + len(messages) ** 2


async def _grow(
    sizer: PromptSizer, targets: list[int], reply_words: int = 50
) -> list[tuple[int, int]]:
    history: list[Message] = [{"role": "system", "content": text.text(1, 200)}]
    history_tokens: int | None = None
    reply: list[Message] = []
    results = []
    for i, target in enumerate(targets):
        message, count = await sizer.fit(history, history_tokens, reply, 100 + i, target)
        results.append((target, count))
        history = [*history, *reply, message]
        history_tokens = count
        reply = [{"role": "assistant", "content": " " + text.text(500 + i, reply_words)}]
    return results


async def test_growing_conversation_hits_targets_without_retokenizing_history() -> None:
    counter = WordCounter()
    sizer = PromptSizer(counter, additive=await check_additivity(counter))
    assert sizer.additive
    counter.calls = counter.tokens_seen = 0
    targets = list(range(40_000, 100_000, 3_000))
    results = await _grow(sizer, targets)
    assert all(target == count for target, count in results)
    # After the first turn every fit is one call, over the new content only: about 2 x 40K
    # for the first prompt, then ~3.3K per turn, where re-counting whole prompts takes ~1.4M.
    assert counter.calls <= len(targets) + 4
    assert counter.tokens_seen < 2 * 40_000 + len(targets) * 4_000 < sum(targets) // 4


async def test_subword_tokenizer_lands_on_the_target_or_just_below() -> None:
    counter = SubwordCounter()
    sizer = PromptSizer(counter, additive=await check_additivity(counter))
    assert sizer.additive
    results = await _grow(sizer, list(range(5_000, 20_000, 1_500)))
    exact = sum(target == count for target, count in results)
    assert exact >= len(results) // 2
    assert all(target - 3 <= count <= target for target, count in results)


async def test_non_additive_template_is_detected_and_counted_whole() -> None:
    counter = PositionalCounter()
    additive = await check_additivity(counter)
    assert not additive
    sizer = PromptSizer(counter, additive=additive)
    results = await _grow(sizer, [1_000, 1_500, 2_200, 3_000])
    assert all(target == count for target, count in results)
