"""Lazy public faces for the role packages (PEP 562).

A role package's `__init__` names what other packages may use (`__all__`) and where each
name lives; `lazy_face` gives it the module `__getattr__` and `__dir__` that import a name's
module on first use. So `from engine import DockerLauncher` works while `import engine`
imports nothing: vLLM's engine core imports `engine/__init__.py` on its way to the patched
scheduler, and `kit --help` must stay instant. Standard library only.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_face(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`, resolving `name -> module` from `table`."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        # later lookups find it in the package's namespace, without this function
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__
