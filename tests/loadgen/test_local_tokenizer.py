"""The local Hugging Face tokenizer fallback, for servers without /tokenize."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from stallkit.loadgen import text
from stallkit.loadgen.agents import TurnFinished, run_agents
from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.errors import LoadError
from stallkit.loadgen.preflight import preflight

ROLES = ["<|system|>", "<|user|>", "<|assistant|>"]
TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' ' }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def word_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A word-level tokenizer whose chat template counts like the simulator's."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {w: i for i, w in enumerate(["[UNK]", *ROLES, "tok", *text.vocabulary()])}
    raw = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="[UNK]", additional_special_tokens=ROLES
    )
    fast.chat_template = TEMPLATE
    out = tmp_path_factory.mktemp("word-tokenizer")
    fast.save_pretrained(str(out))
    return out


async def test_server_without_tokenize_uses_the_named_local_tokenizer(
    hostile: Any, word_tokenizer: Path
) -> None:
    cfg = LoadConfig(
        agents=2, min_context=300, max_context=900, system_prompt_tokens=30,
        new_tokens_min=20, new_tokens_max=80, reply_tokens_min=3, reply_tokens_max=6,
        think_min_s=0, think_max_s=0.01, stagger_s=0.01, max_turns=3,
        tokenizer=str(word_tokenizer),
    )  # fmt: skip
    async with hostile(tokenize=False) as server:
        info = await preflight(server.url, cfg)
        assert info.tokenize == "local" and info.additive
        async with contextlib.aclosing(run_agents(info, cfg)) as events:
            records = [e.record async for e in events if isinstance(e, TurnFinished)]
        assert sum("/tokenize" in r for r in server.requests) == 1  # probed once only
    assert len(records) == 6 and {r.outcome for r in records} == {"ok"}
    assert all(r.prompt_tokens == r.expected_prompt_tokens for r in records)


async def test_unloadable_tokenizer_is_a_load_error(hostile: Any, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    async with hostile(tokenize=False) as server:
        with pytest.raises(LoadError, match="cannot load tokenizer"):
            await preflight(server.url, LoadConfig(tokenizer=str(tmp_path / "missing")))
