"""The role packages' public faces: every name in `__all__` resolves, lazily.

Each face is declared once, as its `if TYPE_CHECKING:` imports, and `__all__` and the lazy
lookup (PEP 562) are derived from them; importing a package must import none of
its modules, nor httpx, pydantic, rich or prometheus_client (vLLM's engine core imports
`engine` on its way to the patched scheduler, and `kit --help` must stay instant).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stallkit.contract.faces import face_table

REPO = Path(__file__).resolve().parents[2]
FACES = ("contract", "engine", "loadgen", "monitor", "reports")
HEAVY = ("httpx", "pydantic", "rich", "prometheus_client", "vllm", "typer")


def _table(package: str) -> dict[str, str]:
    return face_table(package, (REPO / package / "__init__.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize("package", FACES)
def test_every_public_name_resolves_to_its_modules_object(package: str) -> None:
    face = importlib.import_module(f"stallkit.{package}")
    table = _table(package)
    assert face.__all__ == sorted(table)
    for name, module in table.items():
        value = getattr(face, name)
        assert value is getattr(importlib.import_module(module), name), name
    assert set(face.__all__) <= set(dir(face))
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        _ = face.nosuch


@pytest.mark.parametrize("package", FACES)
def test_no_public_name_is_also_a_module_of_its_package(package: str) -> None:
    # importing the module `package.name` would set the package's attribute to the module,
    # so `from package import name` would give the module or the object by import order
    face = importlib.import_module(f"stallkit.{package}")
    modules = {m.name for m in pkgutil.iter_modules([str(REPO / package)])}
    assert not set(face.__all__) & modules


def test_importing_the_packages_imports_none_of_their_modules() -> None:
    code = (
        "import sys\n"
        f"for p in {FACES!r}: __import__('stallkit.' + p)\n"
        f"faces = {['stallkit.' + p for p in FACES]!r}\n"
        "ours = sorted(m for m in sys.modules if m.startswith('stallkit.') and m not in faces "
        "and m != 'stallkit.contract.faces')\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "print(ours, heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "[]"]


def test_a_name_imported_from_a_face_is_the_modules_object() -> None:
    code = (
        "from stallkit.engine import DockerLauncher\nimport stallkit.engine.launch.docker as d\n"
        "from stallkit.monitor import GpuReader, gpu_source\nimport stallkit.monitor.signals.gpu as g\n"
        "print(DockerLauncher is d.DockerLauncher, gpu_source is g.gpu_source)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


@pytest.mark.parametrize("package", FACES)
def test_a_face_lists_its_names_once_in_its_imports(package: str) -> None:
    """No second list to keep in step: `__all__` and the lookup table come from the imports."""
    tree = ast.parse((REPO / package / "__init__.py").read_text(encoding="utf-8"))
    assigned = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert "__all__" not in assigned and not any(isinstance(n, ast.Dict) for n in ast.walk(tree))
    assert _table(package)  # and the face is not empty


@pytest.mark.parametrize(
    ("block", "says"),
    [
        ("from m.a import Name", "import Name as Name"),
        ("from m.a import Name as Other", "import Name as Name"),
        ("from m.a import Name as Name\n    from m.b import Name as Name", "Name is in its face twice"),
        ("from .a import Name as Name", "absolute `from` imports only"),
        ("import m.a", "absolute `from` imports only"),
        ("pass", "absolute `from` imports only"),
    ],
)  # fmt: skip
def test_a_face_refuses_a_name_mypy_would_not_export_or_two_of_one(block: str, says: str) -> None:
    with pytest.raises(ImportError, match=re.escape(says)):
        face_table("m", f"if TYPE_CHECKING:\n    {block}\n")
    with pytest.raises(ImportError, match="no `if TYPE_CHECKING:` imports"):
        face_table("m", "import typing\n")
    assert face_table("m", "if typing.TYPE_CHECKING:\n    from m.a import B as B\n") == {"B": "m.a"}


@pytest.mark.parametrize("package", [*FACES, "kits"])
def test_a_role_imported_by_its_bare_name_is_refused_with_the_one_name(package: str) -> None:
    # from a checkout's root `engine/` is on the path too: a second copy of every module
    done = subprocess.run(
        [sys.executable, "-c", f"import {package}"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 1
    assert f"ImportError: stallkit's '{package}' package imports as 'stallkit.{package}'" in (
        done.stderr
    )
