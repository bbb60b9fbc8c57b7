"""Lazy public faces for the role packages (PEP 562), each declared once.

A role package's `__init__` names what other packages may use, once: the imports in its
`if TYPE_CHECKING:` block, each in the explicit re-export form (`from pkg.mod import Name as
Name`). Type checkers read them as the package's names; at run time `public_face` reads the
same block from the package's source and gives it `__all__` and the module `__getattr__` and
`__dir__` that import a name's module on first use. So `from stallkit.engine import DockerLauncher`
works while `import stallkit.engine` imports nothing: vLLM's engine core imports its `__init__.py`
on its way to the patched scheduler, and `kit --help` must stay instant. Standard library
only (the face's source is parsed with `ast`, so a package must ship its `__init__.py`).
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["face_table", "public_face"]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def face_table(package: str, source: str) -> dict[str, str]:
    """`name -> module` from the `if TYPE_CHECKING:` imports of `package`'s `__init__` source.

    Raises ImportError for a face that re-exports nothing, or a name not in the `Name as Name`
    form (mypy would not export it, and a renamed one would not be the module's name).
    """
    table: dict[str, str] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level):
                raise ImportError(f"{package}: its face holds absolute `from` imports only")
            for alias in stmt.names:
                if alias.asname != alias.name:
                    raise ImportError(
                        f"{package}: write `from {stmt.module} import {alias.name} as "
                        f"{alias.name}` in its face"
                    )
                if alias.name in table:
                    raise ImportError(f"{package}: {alias.name} is in its face twice")
                table[alias.name] = stmt.module
    if not table:
        raise ImportError(f"{package}: no `if TYPE_CHECKING:` imports to make its face of")
    return table


def public_face(
    package: str,
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """`__all__`, `__getattr__` and `__dir__` for `package`, from its face's imports.

    Raises ImportError for a role imported by its bare name (`import engine` from a checkout's
    root, where the role folders sit beside `stallkit/`): that would be a second copy of every
    module, with classes that are not the ones the rest of the tool uses.
    """
    if not package.startswith("stallkit."):
        raise ImportError(f"stallkit's {package!r} package imports as 'stallkit.{package}'")
    module = sys.modules[package]
    get_source = getattr(getattr(module.__spec__, "loader", None), "get_source", None)
    source = get_source(package) if get_source is not None else None
    if source is None:
        raise ImportError(f"{package}: its face is read from its source, which is missing")
    table = face_table(package, source)
    return (sorted(table), *_lookups(package, table))


def _lookups(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    module = sys.modules[package]

    def __getattr__(name: str) -> Any:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where), name)
        # later lookups find it in the package's namespace, without this function
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(module), *table})

    return __getattr__, __dir__
