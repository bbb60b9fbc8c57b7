"""Engine kinds as classes: one registry (`stallkit.kits.arm.kinds`), no kind-name branches
elsewhere, and every registered spec case with its kind class."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from stallkit.engine import parse_spec, spec_cases
from stallkit.kits.arm.kinds import kind_of, kinds
from stallkit.kits.kit import load_kit

REPO = Path(__file__).resolve().parents[3]
ROLES = ("contract", "engine", "loadgen", "monitor", "kits", "reports")
SPEC_CLASSES = {case.__name__ for case in spec_cases().values()}
#: where a kind's name may be compared: the spec cases and the registry of behaviours
REGISTRY = {
    "engine/spec.py",
    *(f"kits/arm/kinds/{p.name}" for p in (REPO / "kits/arm/kinds").glob("*.py")),
}
#: other files that narrow a spec to its case, with why (no behaviour chosen by kind there)
NARROWING = {
    "engine/launch/vllm.py": "the vllm: launcher refuses any other spec (a Python caller's error)",
    "engine/launch/patched.py": "the patched: launcher refuses any other spec, as vllm: does",
    "engine/serve/server.py": "`--core` names a twin: spec; anything else is refused",
    "reports/rundir.py": "reports read meta.json's recorded kind; they cannot import the kinds",
    # not an engine kind: how forensics reach an engine (sim, local, docker, remote)
    "monitor/on_stall/forensics.py": "forensics' own target kinds, set by each kind's class",
}


def _kind_names() -> set[str]:
    return set(spec_cases())


def _branches(path: Path, names: set[str]) -> list[int]:
    """Lines comparing `X.kind` with a kind's name, or testing isinstance against a spec case."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            on_kind = any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides)
            texts = {
                c.value
                for s in sides
                for c in ast.walk(s)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            }
            if on_kind and texts & names:
                found.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and isinstance(node.value, ast.Constant):
            if node.value.value in names:
                found.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
        ):
            classes = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            if classes & SPEC_CLASSES:
                found.append(node.lineno)
    return found


def test_no_code_branches_on_an_engine_kinds_name_outside_the_registry() -> None:
    names = _kind_names()
    assert len(names) >= 7  # the shipped kinds at least (a test may have registered another)
    where = {}
    for role in ROLES:
        for path in sorted((REPO / role).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            lines = _branches(path, names)
            if lines and rel not in REGISTRY:
                where[rel] = lines
    # the scan sees branches: the narrowings listed are found, and nothing else
    assert set(where) == set(NARROWING), where


def test_every_registered_spec_case_has_one_kind_class() -> None:
    registered, cases = kinds(), spec_cases()
    assert set(registered) == set(cases)
    assert all(kind.spec_class is cases[tag] for tag, kind in registered.items())


@pytest.mark.parametrize(
    ("spec", "virtual_by_default", "virtual_when_asked", "image", "attaches"),
    [
        ("sim:base", False, True, False, False),
        ("twin:stock", True, True, False, False),
        ("url:http://127.0.0.1:9", False, False, False, True),
        ("vllm:/m", False, False, False, False),
        ("llamacpp:/m.gguf", False, False, False, False),
        ("patched:fix", False, False, False, False),
        ("vllm/vllm-openai:v0.32", False, False, True, False),
    ],
)  # fmt: skip
def test_each_kind_answers_for_itself(
    spec: str, virtual_by_default: bool, virtual_when_asked: bool, image: bool, attaches: bool
) -> None:
    kind = kind_of(parse_spec(spec))
    assert kind.runs_virtual("wall") is virtual_by_default
    assert kind.runs_virtual("virtual") is virtual_when_asked
    assert (kind.image, kind.attaches) == (image, attaches)


def test_a_kind_takes_its_time_scale_from_its_own_section() -> None:
    kit = load_kit("restore-stall", {"sim.time_scale": 40.0, "engine.time_scale": 7.0})
    scales = {
        s: kind_of(parse_spec(s)).time_scale(kit) for s in ("sim:fix", "library/e:1", "vllm:/m")
    }
    assert scales == {"sim:fix": 40.0, "library/e:1": 7.0, "vllm:/m": 1.0}


#: where a spec's text may be parsed: its cases, the registry (`arm_specs`: once per arm, with
#: what the kit gives it) and the command lines; everything after those is handed the parsed spec
PARSERS = {"engine/spec.py", "kits/arm/kinds/base.py"}
#: other command lines and input files that read a spec's text, with why
PARSED_AT_INPUT = {
    "engine/serve/server.py": "`kit sim serve --core` names a twin: spec on its command line",
    "kits/sweep/plan.py": "`--arms` (parse_arms) checks each arm's text as the flag is read",
    "kits/corpus/case.py": "a corpus case's TOML names its engines' specs, an input file",
}


def _parse_calls(path: Path) -> list[int]:
    """Lines calling `parse_spec`, by its name or any name it was imported as."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {"parse_spec"} | {
        alias.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name == "parse_spec" and alias.asname
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id in names)
            or (isinstance(node.func, ast.Attribute) and node.func.attr in names)
        )
    ]


def test_no_code_parses_a_spec_after_the_command_line_but_the_registry() -> None:
    found: dict[str, list[int]] = {}
    for role in ("engine", "kits", "loadgen", "monitor", "reports"):
        for path in sorted((REPO / role).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            lines = _parse_calls(path)
            if lines and rel not in PARSERS and not rel.startswith("kits/cli/"):
                found[rel] = lines
    stray = [
        f"{rel}:{line}"
        for rel, lines in found.items()
        if rel not in PARSED_AT_INPUT
        for line in lines
    ]
    assert not stray, f"parse_spec outside the registry and the command line: {', '.join(stray)}"
    # the scan sees calls: each input listed still parses one
    assert set(found) == set(PARSED_AT_INPUT), found
