"""A shared constant or type is defined in one module and imported everywhere else.

Read with `ast` from the sources (nothing is imported): a module-level assignment of one of
these names outside its home module is a second copy, which drifts (two copies of the stop
marker were held together by a test instead of being one constant).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("contract", "engine", "loadgen", "monitor", "kits", "reports")

#: name -> the one module that defines it
HOMES = {
    "STOP_MARKER": "contract/files.py",
    "EngineKind": "contract/meta.py",
    "Clock": "contract/meta.py",
    "EngineCapabilities": "contract/meta.py",
    "Policy": "engine/policy/controller.py",
}


def _defined_names(path: Path) -> set[str]:
    """Names a module binds at its top level by assignment, annotation or class."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
    return names


def _definitions(name: str) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if name in _defined_names(path):
                found.append(path.relative_to(REPO).as_posix())
    return found


@pytest.mark.parametrize("name", sorted(HOMES))
def test_each_shared_name_has_one_definition(name: str) -> None:
    assert _definitions(name) == [HOMES[name]]
