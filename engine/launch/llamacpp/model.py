"""Write a tiny random-weight Llama as one GGUF file, for llama.cpp's server on CPU.

llama.cpp serves GGUF files only; this one exists so that CI and laptops can run the real
server without a model hub. It is a two-layer Llama (hidden size 64, 4 heads) whose weights
come from a seeded generator, with a SentencePiece-style vocabulary (llama.cpp's `llama`
tokenizer model): the unknown, begin and end tokens, the 256 byte tokens the tokenizer falls
back on (it needs the newline byte), and pieces made of printable ASCII (single characters,
two-letter syllables, the same with the word-start mark `▁`), scored so that longer pieces
merge first. A plain chat template renders `role: content` lines.

As with the tiny vLLM model (`stallkit.engine.launch.tinymodel`), the weights are arranged so
that the model never samples the special or byte tokens: one hidden channel is a constant no
layer writes to, and only those tokens' output rows read it, with a large negative weight. A
reply is then printable ASCII that re-tokenizes cleanly in the next turn's prompt, and never
ends early on an end-of-sequence token. The same seed gives byte-identical files. `gguf` and
`numpy` are imported only when writing; a missing one is a one-line EngineError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stallkit.engine.errors import EngineError
from stallkit.engine.launch.tinymodel import SYLLABLES

__all__ = ["EXTRA_HINT", "TinyGguf", "tiny_vocab", "write_tiny_gguf"]

EXTRA_HINT = "pip install 'stallkit[llamacpp]'"
#: the word-start mark of SentencePiece vocabularies (llama.cpp's SPM tokenizer writes spaces so)
WORD_START = "\u2581"
UNK, BOS, EOS = "<unk>", "<s>", "</s>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] + ': ' + message['content'] + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)
# gguf's TokenType values (the same numbers as llama.cpp's llama_token_type)
_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6


class TinyGguf:
    """The shape of the tiny model: small enough to load in a blink, big enough to batch."""

    def __init__(
        self,
        *,
        hidden_size: int = 64,
        num_layers: int = 2,
        num_heads: int = 4,
        context_length: int = 32768,
    ) -> None:
        if hidden_size % num_heads:
            raise ValueError("hidden_size must be a multiple of num_heads")
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.context_length = context_length

    @property
    def ffn_size(self) -> int:
        return self.hidden_size * 2


def tiny_vocab() -> tuple[list[str], list[float], list[int]]:
    """The vocabulary's pieces, scores and token types, in id order."""
    tokens = [UNK, BOS, EOS]
    types = [_UNKNOWN, _CONTROL, _CONTROL]
    tokens += [f"<0x{byte:02X}>" for byte in range(256)]
    types += [_BYTE] * 256
    singles = [WORD_START] + [chr(c) for c in range(33, 127)]
    syllables = sorted(set(SYLLABLES))
    pieces = singles + [WORD_START + s for s in singles[1:]] + syllables
    pieces += [WORD_START + s for s in syllables]
    tokens += pieces
    types += [_NORMAL] * len(pieces)
    # SentencePiece merges the pair whose piece scores highest: longer pieces first
    scores = [0.0] * (3 + 256) + [float(len(p)) - i * 1e-3 for i, p in enumerate(pieces)]
    return tokens, scores, types


def _import_stack() -> tuple[Any, Any]:
    """Import numpy and gguf, or fail naming the extra to install."""
    try:
        import gguf
        import numpy
    except ImportError as exc:
        raise EngineError(
            f"writing the tiny GGUF model needs {exc.name or 'gguf'}, which is not installed",
            EXTRA_HINT,
        ) from None
    return numpy, gguf


def _weights(np: Any, shape: TinyGguf, vocab_size: int, seed: int) -> dict[str, Any]:
    """The tensors by GGUF name (numpy shapes are (out, in), as llama.cpp reads them)."""
    rng = np.random.default_rng(seed)
    d, f = shape.hidden_size, shape.ffn_size

    def normal(*dims: int) -> Any:
        return (rng.standard_normal(dims) * 0.02).astype(np.float32)

    embed = normal(vocab_size, d)
    embed[:, 0] = 0.1  # the constant channel (see the module's docstring)
    tensors: dict[str, Any] = {"token_embd.weight": embed}
    for layer in range(shape.num_layers):
        blk = f"blk.{layer}"
        out_proj, down = normal(d, d), normal(d, f)
        out_proj[0, :] = 0.0  # no layer writes to the constant channel
        down[0, :] = 0.0
        tensors.update(
            {
                f"{blk}.attn_norm.weight": np.ones(d, dtype=np.float32),
                f"{blk}.attn_q.weight": normal(d, d),
                f"{blk}.attn_k.weight": normal(d, d),
                f"{blk}.attn_v.weight": normal(d, d),
                f"{blk}.attn_output.weight": out_proj,
                f"{blk}.ffn_norm.weight": np.ones(d, dtype=np.float32),
                f"{blk}.ffn_gate.weight": normal(f, d),
                f"{blk}.ffn_up.weight": normal(f, d),
                f"{blk}.ffn_down.weight": down,
            }
        )
    tensors["output_norm.weight"] = np.ones(d, dtype=np.float32)
    head = normal(vocab_size, d)
    head[:, 0] = 0.0
    head[: 3 + 256, 0] = -40.0  # the special and byte tokens: never sampled
    tensors["output.weight"] = head
    return tensors


def write_tiny_gguf(path: Path, seed: int = 0, shape: TinyGguf | None = None) -> Path:
    """Write the tiny model to `path` (a `.gguf` file; its folder is created); return it."""
    np, gguf = _import_stack()
    shape = shape or TinyGguf()
    path = Path(path)
    if path.is_dir():
        raise EngineError(f"{path} is a directory", "give a file name, e.g. tiny.gguf")
    tokens, scores, types = tiny_vocab()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = gguf.GGUFWriter(str(path), "llama")
        writer.add_name("stallkit tiny llama")
        writer.add_context_length(shape.context_length)
        writer.add_embedding_length(shape.hidden_size)
        writer.add_block_count(shape.num_layers)
        writer.add_feed_forward_length(shape.ffn_size)
        writer.add_head_count(shape.num_heads)
        writer.add_head_count_kv(shape.num_heads)
        writer.add_layer_norm_rms_eps(1e-5)
        writer.add_rope_freq_base(10000.0)
        writer.add_file_type(gguf.LlamaFileType.ALL_F32)
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_unk_token_id(0)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_add_bos_token(True)
        writer.add_chat_template(CHAT_TEMPLATE)
        for name, tensor in _weights(np, shape, len(tokens), seed).items():
            writer.add_tensor(name, tensor)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    except OSError as exc:
        raise EngineError(
            f"cannot write the tiny GGUF model to {path}: {exc.strerror or exc}",
            "choose a writable file path",
        ) from None
    return path
