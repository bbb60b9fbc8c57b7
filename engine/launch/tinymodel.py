"""Build a tiny random-weight Llama with a locally trained tokenizer, for real vLLM on CPU.

The model exists so that CI and laptops can run the real engine without a model hub: a
two-layer Llama (hidden size 128, vocabulary about 2K, 32K positions) whose weights come from
a seeded generator, a byte-level BPE tokenizer trained by `tokenizers` on generated text, and
a plain chat template. The output is meaningless but well-formed: the weights are arranged so
that the model never samples special tokens (no early end of sequence, no role markers) nor
tokens that decode to anything but printable ASCII, so a reply re-tokenizes cleanly in the
next turn's prompt. The same seed gives byte-identical files. `transformers`, `tokenizers`
and `torch` are imported only when building, and a missing one is a one-line EngineError.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from stallkit.engine.errors import EngineError
from stallkit.engine.install import VLLM_MISSING

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|tool|>")
SPECIAL_TOKENS = (BOS, EOS, PAD, *ROLE_TOKENS)

# Renders `<|role|>content` lines, then the assistant marker as the generation prompt.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' }}{{ message['content'] }}{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

# two-letter syllables, concatenated
_SYLLABLE_TEXT = (
    "karitomenalosuvidepanetiromakuselamidofuhazebogiyawuanelinorusatenisonarstthchshquprtrgrblcl"
)
#: the two-letter syllables the tiny models' words are made of (the GGUF model's too)
SYLLABLES = tuple(_SYLLABLE_TEXT[i : i + 2] for i in range(0, len(_SYLLABLE_TEXT), 2))
_PUNCT = (".", ",", "?", "!", ":", ";", " -", "()", "[]", "{}", "=", "+", "/", "'", '"')


def _import_stack() -> tuple[Any, Any, Any]:
    """Import torch, tokenizers and transformers, or fail naming the extra to install."""
    try:
        import tokenizers
        import torch
        import transformers
    except ImportError as exc:
        raise EngineError(
            f"building the tiny model needs {exc.name or 'torch/transformers/tokenizers'}, "
            "which is not installed",
            VLLM_MISSING,
        ) from None
    return torch, tokenizers, transformers


def training_text(seed: int, lines: int = 4000) -> list[str]:
    """Deterministic ASCII text (made-up words, numbers, punctuation) to train the tokenizer."""
    rng = random.Random(seed)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    out: list[str] = []
    for _ in range(lines):
        parts: list[str] = []
        for _ in range(rng.randint(4, 24)):
            roll = rng.random()
            if roll < 0.8:
                word = rng.choice(words)
                parts.append(word.capitalize() if rng.random() < 0.1 else word)
            elif roll < 0.9:
                parts.append(str(rng.randint(0, 9999)))
            else:
                parts.append(rng.choice(_PUNCT))
        out.append(" ".join(parts))
    return out


def _train_tokenizer(tokenizers: Any, seed: int, vocab_size: int) -> Any:
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(seed), trainer=trainer)
    return tok


def _suppressed_ids(tok: Any) -> list[int]:
    """Ids the model must never sample: specials, and tokens that are not printable ASCII."""
    ids: list[int] = []
    for token_id in range(tok.get_vocab_size()):
        text = tok.decode([token_id], skip_special_tokens=False)
        token = tok.id_to_token(token_id)
        printable = text != "" and all(32 <= ord(ch) < 127 for ch in text)
        if token in SPECIAL_TOKENS or not printable:
            ids.append(token_id)
    return ids


def _shape_weights(torch: Any, model: Any, suppressed: list[int]) -> None:
    """Make one hidden channel a constant that only suppressed tokens read, negatively.

    Dimension 0 of every embedding is set to a constant and no layer writes to it, so after
    the final norm it is always positive; the output rows of suppressed tokens weigh it with
    a large negative factor, pushing their logits far below the rest, and the other rows
    ignore it.
    """
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 0.1
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        head = model.lm_head.weight
        head[:, 0] = 0.0
        head[suppressed, 0] = -40.0


def build_tiny_model(
    out_dir: Path,
    seed: int = 0,
    vocab_size: int = 2048,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    max_position_embeddings: int = 32768,
) -> Path:
    """Write a tiny random Llama with tokenizer and chat template to `out_dir`; return it.

    The directory loads with `vllm serve DIR` and `transformers.AutoTokenizer/AutoModel`.
    The same arguments give byte-identical files.
    """
    _import_stack()  # fail before touching the directory when the extra is missing
    architecture = {
        "hidden_size": hidden_size,
        "intermediate_size": hidden_size * 2,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_heads,
        "max_position_embeddings": max_position_embeddings,
    }
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        _write_model(out_dir, seed, vocab_size, architecture)
    except OSError as exc:
        raise EngineError(
            f"cannot write the tiny model to {out_dir}: {exc.strerror or exc}",
            "choose a writable directory that is not a file",
        ) from None
    return out_dir


def _write_model(out_dir: Path, seed: int, vocab_size: int, architecture: dict[str, int]) -> None:
    torch, tokenizers, transformers = _import_stack()
    transformers.utils.logging.disable_progress_bar()
    raw_tok = _train_tokenizer(tokenizers, seed, vocab_size)
    ids = {name: raw_tok.token_to_id(name) for name in SPECIAL_TOKENS}
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=raw_tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        additional_special_tokens=list(ROLE_TOKENS),
        model_max_length=architecture["max_position_embeddings"],
    )  # fmt: skip
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))

    config = transformers.LlamaConfig(
        vocab_size=raw_tok.get_vocab_size(),
        **architecture,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=ids[BOS],
        eos_token_id=ids[EOS],
        pad_token_id=ids[PAD],
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    _shape_weights(torch, model, _suppressed_ids(raw_tok))
    model.save_pretrained(str(out_dir), safe_serialization=True)
    (out_dir / "stallkit-tiny-model.json").write_text(
        json.dumps({"seed": seed, "vocab_size": config.vocab_size}, sort_keys=True) + "\n"
    )
