"""No import cycle between the orchestration's modules (every import counted, lazy ones too)."""

from __future__ import annotations

import ast
from pathlib import Path

KITS = Path(__file__).resolve().parents[2] / "kits"


def _graph() -> dict[str, set[str]]:
    modules = {
        ".".join(["stallkit", *p.relative_to(KITS.parent).with_suffix("").parts]): p
        for p in KITS.rglob("*.py")
        if p.stem != "__init__"
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in modules:
                deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in modules}
        graph[name] = deps - {name}
    return graph


def test_kits_modules_import_without_cycles() -> None:
    graph = _graph()
    assert (
        "stallkit.kits.ab.execute" not in graph["stallkit.kits.arm.wall"]
        and "stallkit.kits.ab.execute" not in graph["stallkit.kits.ab.plan"]
    )
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            assert state.get(dep) != 1, " -> ".join([*path, node, dep])
            if dep not in state:
                visit(dep, [*path, node])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
