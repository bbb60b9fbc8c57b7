"""A source tree's modules ahead of the installed ones, file by file, in this process.

`--overlay TREE` for a twin arm: a module of vLLM or of LMCache (`OVERLAY_PACKAGES`) whose
source file exists under TREE (for `vllm.v1.core.sched.scheduler`,
`TREE/vllm/v1/core/sched/scheduler.py`) is loaded from there;
every other module comes from the installed package as before. So a fork's checkout runs its
own `scheduler.py` over the installed vLLM's compiled parts, and a tree that holds only the
changed files works as well as a whole checkout (the docker overlay's bind mount does the
same over an image's files). It must be installed before the first import of the package it
shadows; `install_overlay` refuses afterwards rather than mixing two versions in one process.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from stallkit.engine.errors import EngineError

__all__ = ["OVERLAY_PACKAGES", "install_overlay"]

#: the packages an overlay may shadow: vLLM, and LMCache (its vLLM connector's other half)
OVERLAY_PACKAGES = ("vllm", "lmcache")


class _TreeFinder(importlib.abc.MetaPathFinder):
    """Finds modules in `root` first; packages keep the installed directory behind it."""

    def __init__(self, root: Path, packages: tuple[str, ...]) -> None:
        self.root, self.packages = root, packages

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] not in self.packages:
            return None
        rel = Path(*fullname.split("."))
        module_file = self.root / rel.with_suffix(".py")
        if module_file.is_file():
            return importlib.util.spec_from_file_location(fullname, module_file)
        package_dir = self.root / rel
        if not package_dir.is_dir():
            return None
        # a package: the installed one, with the tree's directory searched first for its
        # modules (its own __init__.py from the tree when the tree has one)
        installed = importlib.machinery.PathFinder.find_spec(fullname, path)
        init = package_dir / "__init__.py"
        if init.is_file():
            locations = [str(package_dir)]
            if installed is not None and installed.submodule_search_locations:
                locations += list(installed.submodule_search_locations)
            return importlib.util.spec_from_file_location(
                fullname, init, submodule_search_locations=locations
            )
        if installed is not None and installed.submodule_search_locations is not None:
            installed.submodule_search_locations.insert(0, str(package_dir))
        return installed


def install_overlay(tree: str | Path, packages: tuple[str, ...] = OVERLAY_PACKAGES) -> Path:
    """Put `tree`'s modules of `packages` ahead of the installed ones (EngineError if it cannot)."""
    root = Path(tree).expanduser().resolve()
    if not root.is_dir():
        raise EngineError(
            f"overlay {tree} is not a directory",
            "pass a source tree holding e.g. vllm/v1/... or lmcache/v1/...",
        )
    if not any((root / name).exists() or (root / f"{name}.py").exists() for name in packages):
        raise EngineError(
            f"overlay {tree} holds none of {', '.join(packages)}",
            "pass the directory that holds the package (e.g. the checkout with vllm/ in it)",
        )
    if any(isinstance(f, _TreeFinder) and f.root == root for f in sys.meta_path):
        return root  # installed already (by the worker, before this engine's import)
    loaded = [name for name in packages if name in sys.modules]
    if loaded:
        raise EngineError(
            f"overlay {tree}: {', '.join(loaded)} already imported in this process",
            "an overlay applies from a fresh worker process (the twin's arms run in one)",
        )
    sys.meta_path.insert(0, _TreeFinder(root, packages))
    return root
