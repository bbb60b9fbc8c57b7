"""The tiny GGUF model: the keys and tensors llama.cpp's llama loader reads, a vocabulary its
SentencePiece tokenizer accepts, the same file for the same seed, and `kit engine tiny-gguf`.
Needs only the gguf package (the `llamacpp` extra); no server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stallkit.engine.errors import EngineError
from stallkit.engine.launch.llamacpp.model import TinyGguf, tiny_vocab, write_tiny_gguf
from stallkit.kits.cli import app

gguf = pytest.importorskip("gguf", reason="the gguf package is not installed (stallkit[llamacpp])")


def _fields(reader: Any) -> dict[str, Any]:
    return {name: field.contents() for name, field in reader.fields.items()}


def test_the_file_holds_what_llamas_loader_and_tokenizer_read(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "m" / "tiny.gguf")
    reader = gguf.GGUFReader(path)
    fields = _fields(reader)
    assert fields["general.architecture"] == "llama"
    for key in ("context_length", "embedding_length", "block_count", "feed_forward_length",
                "attention.head_count", "attention.layer_norm_rms_epsilon"):  # fmt: skip
        assert f"llama.{key}" in fields, key
    assert fields["tokenizer.ggml.model"] == "llama"
    tokens = fields["tokenizer.ggml.tokens"]
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert "<0x0A>" in tokens  # the newline byte llama.cpp's SPM vocabulary looks up
    assert (
        len(tokens)
        == len(fields["tokenizer.ggml.scores"])
        == len(fields["tokenizer.ggml.token_type"])
    )
    assert "{% for message in messages %}" in fields["tokenizer.chat_template"]
    names = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}
    assert names["token_embd.weight"] == (64, len(tokens))  # ggml order: (in, out)
    assert names["output.weight"] == (64, len(tokens))
    assert {f"blk.{i}.ffn_down.weight" for i in range(2)} <= set(names)


def test_only_printable_pieces_can_win_the_output(tmp_path: Path) -> None:
    """The constant channel reaches only the special and byte tokens' rows, negatively."""
    np = pytest.importorskip("numpy")
    reader = gguf.GGUFReader(write_tiny_gguf(tmp_path / "tiny.gguf", seed=3))
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    head, embed = tensors["output.weight"], tensors["token_embd.weight"]
    assert (embed[:, 0] == np.float32(0.1)).all()
    assert (head[: 3 + 256, 0] == -40).all() and (head[3 + 256 :, 0] == 0).all()
    for layer in range(2):
        assert not tensors[f"blk.{layer}.attn_output.weight"][0].any()
        assert not tensors[f"blk.{layer}.ffn_down.weight"][0].any()
    tokens, _, types = tiny_vocab()
    sampled = [t for t, kind in zip(tokens, types, strict=True) if kind == 1]
    assert all(all(32 <= ord(c) < 127 for c in t.replace("\u2581", " ")) for t in sampled)


def test_the_same_seed_writes_the_same_bytes_and_another_does_not(tmp_path: Path) -> None:
    one = write_tiny_gguf(tmp_path / "a.gguf").read_bytes()
    assert write_tiny_gguf(tmp_path / "b.gguf").read_bytes() == one
    assert write_tiny_gguf(tmp_path / "c.gguf", seed=1).read_bytes() != one
    assert write_tiny_gguf(tmp_path / "d.gguf", shape=TinyGguf(num_layers=3)).read_bytes() != one


def test_a_directory_is_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as caught:
        write_tiny_gguf(tmp_path)
    assert caught.value.hint and "file name" in caught.value.hint


def test_kit_engine_tiny_gguf_prints_the_path_and_refuses_a_directory(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["engine", "tiny-gguf", str(tmp_path / "t.gguf"), "--seed", "2"])
    assert done.exit_code == 0, done.output
    assert done.stdout.strip().splitlines()[-1] == str(tmp_path / "t.gguf")
    assert (tmp_path / "t.gguf").stat().st_size > 100_000
    refused = CliRunner().invoke(app, ["engine", "tiny-gguf", str(tmp_path)])
    assert refused.exit_code == 2
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and "is a directory" in lines[0], refused.output
    assert "Traceback" not in refused.output
