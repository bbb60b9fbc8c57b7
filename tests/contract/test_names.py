"""The shared metric names: one place, checked against vLLM's golden list, used everywhere.

No package source spells a `vllm:`, `stallkit_` or `DCGM_` family in a string literal outside
`contract/names.py` (read with `ast`; docstrings are prose and do not count), the names hold
against the golden list of a real vLLM 0.32, the alert rules and the exporter name the same
constants, and `stallkit.contract.names` imports nothing but the standard library (vLLM's engine-core
process imports it through the patched scheduler).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from stallkit.contract import names
from stallkit.monitor.on_stall.exporter import StallExporter
from stallkit.monitor.prometheus.rules import RulesSettings, rules_document

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("contract", "engine", "loadgen", "monitor", "kits", "reports")
GOLDEN = REPO / "tests" / "data" / "vllm-0.32-metric-families.txt"
#: a family name, or part of one, inside a string literal
FAMILY = re.compile(r"vllm:[a-z]|stallkit_[a-z]|DCGM_[A-Z]")
#: literals that look like a family prefix but are something else, with why
ALLOWED = {
    ("engine/spec.py", "vllm:"): "the engine spec prefix of vllm:MODEL_DIR",
}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def family_literals(source: str, path: str) -> list[str]:
    """`path:line: literal` for each string literal that spells a family or a bare prefix."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if id(node) in docs or (path, node.value) in ALLOWED:
            continue
        if FAMILY.search(node.value) or node.value in ("vllm:", "stallkit_", "DCGM_"):
            out.append(f"{path}:{node.lineno}: {node.value!r}")
    return out


def test_the_scan_finds_names_in_literals_and_f_strings() -> None:
    source = 'X = "vllm:num_requests_running"\nY = f"rate({z}) DCGM_FI_DEV_GPU_UTIL"\n'
    source += 'Z = f"vllm:{name}_total"\nW = "stallkit_stalls"\n'
    source += 'def f():\n    """vllm:kv_cache_usage_perc in a docstring is prose."""\n'
    found = family_literals('"""doc: vllm:x"""\n' + source, "m.py")
    assert sorted(int(f.split(":")[1]) for f in found) == [2, 3, 4, 5]
    assert family_literals('H = "write vllm:MODEL_DIR or sim:/vllm: specs"\n', "m.py") == []
    assert family_literals('P = "vllm:"\n', "engine/spec.py") == []
    assert family_literals('P = "vllm:"\n', "monitor/signals/parse.py") != []


def test_no_family_name_is_spelled_outside_contract_names() -> None:
    found = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel != "contract/names.py":
                found += family_literals(path.read_text(encoding="utf-8"), rel)
    assert found == [], "\n".join(found)


def _golden() -> set[str]:
    return {line.split()[0] for line in GOLDEN.read_text().splitlines() if line.strip()}


def test_vllm_names_are_the_golden_lists() -> None:
    golden = _golden()
    declared = {
        value
        for key, value in vars(names).items()
        if key.isupper() and isinstance(value, str) and value.startswith(names.VLLM_PREFIX)
    } - {names.VLLM_PREFIX}
    upstream = declared - names.FORK_FAMILIES - {names.GPU_CACHE_USAGE_OLD}
    assert upstream <= golden, upstream - golden
    assert not (names.FORK_FAMILIES | {names.GPU_CACHE_USAGE_OLD}) & golden
    assert golden >= names.SIM_VLLM_FAMILIES and names.SIM_FORK_FAMILIES <= names.FORK_FAMILIES
    assert names.MONITOR_FAMILIES - names.FORK_FAMILIES <= names.SIM_VLLM_FAMILIES
    assert names.bare(names.GENERATION_TOKENS) == "vllm:generation_tokens"
    assert names.bare(names.KV_CACHE_USAGE) == names.KV_CACHE_USAGE


def test_the_rules_and_the_exporter_name_the_shared_constants() -> None:
    text = str(rules_document(RulesSettings()))
    series = set(re.findall(r"(?<![\w:])((?:vllm:|DCGM_|stallkit_)[A-Za-z0-9_]+)", text))
    known = names.MONITOR_FAMILIES | {names.GPU_CACHE_USAGE_OLD, names.DCGM_GPU_UTIL}
    known |= {names.sample(names.ITERATION_TOKENS, "count"), names.STALL_ACTIVE}
    assert series and series <= known, series - known
    assert {names.STALL_ACTIVE, names.DCGM_GPU_UTIL, names.GENERATION_TOKENS} <= series
    exporter = StallExporter()
    exporter.sink("http://e:1", "a")
    exported = {family.name for family in exporter.registry.collect()}
    assert exported == {names.bare(n) for n in names.STALLKIT_FAMILIES}


def test_contract_names_imports_the_standard_library_only() -> None:
    code = (
        "import sys, stallkit.contract.names\n"
        "ours = sorted(m for m in sys.modules if m.startswith('stallkit.') and m not in "
        "('stallkit.contract', 'stallkit.contract.faces', 'stallkit.contract.names'))\n"
        "heavy = sorted(m for m in ('pydantic', 'httpx', 'rich', 'prometheus_client') "
        "if m in sys.modules)\n"
        "print(ours, heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "[]"]
