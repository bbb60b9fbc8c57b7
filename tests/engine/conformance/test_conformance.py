"""`kit engine conformance` without vLLM: JUnit comparison, the sdist cache, the report, refusals.

The JUnit documents are written here as pytest writes them (and one comes from a real pytest
run of a small test file); the sdist is a small tar.gz served in-process by
`httpx.MockTransport`, as PyPI's JSON API and file host would serve it.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

from stallkit.engine.conformance.fetch import cached_tests, release_of, write_offline_hub
from stallkit.engine.conformance.junit import (
    Comparison,
    TestOutcome,
    compare,
    counts,
    explain,
    parse_junit,
)
from stallkit.engine.conformance.run import (
    DEFAULT_CONFIG,
    ConformanceReport,
    RunSummary,
    SchedulersBuilt,
    parse_additional_config,
)
from stallkit.engine.conformance.runs import conftest_blockers
from stallkit.engine.conformance.table import conformance_lines
from stallkit.engine.errors import EngineError
from tests.support import kit

STOCK = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="2" failures="2" skipped="1" tests="8" time="3.2">
<testcase classname="tests.v1.core.test_scheduler" name="test_add_requests" file="tests/v1/core/test_scheduler.py" line="40" time="0.01" />
<testcase classname="tests.v1.core.test_scheduler" name="test_preempt[1.5-True]" file="tests/v1/core/test_scheduler.py" line="88" time="0.02" />
<testcase classname="tests.v1.core.test_scheduler.TestStop" name="test_stop" file="tests/v1/core/test_scheduler.py" line="120" time="0.01" />
<testcase classname="tests.v1.core.test_scheduler" name="test_multimodal" file="tests/v1/core/test_scheduler.py" line="200" time="0.3"><failure message="pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig&#10;  Value error, Invalid repository ID or local directory specified: 'llava-hf/llava-1.5-7b-hf'.">tests/v1/core/utils.py:105: ValidationError</failure></testcase>
<testcase classname="tests.v1.core.test_scheduler" name="test_multimodal_chunks" file="tests/v1/core/test_scheduler.py" line="230" time="0.3"><failure message="pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig&#10;  Value error, Invalid repository ID or local directory specified: 'llava-hf/llava-1.5-7b-hf'.">tests/v1/core/utils.py:105: ValidationError</failure></testcase>
<testcase classname="tests.v1.core.test_kv_cache_utils" name="test_warns" file="tests/v1/core/test_kv_cache_utils.py" line="4190" time="0.0"><error message="failed on setup with &quot;file tests/v1/core/test_kv_cache_utils.py, line 4190&#10;  def test_warns(caplog_vllm):&#10;E       fixture 'caplog_vllm' not found&quot;">fixture 'caplog_vllm' not found</error></testcase>
<testcase classname="tests.v1.core.test_kv_cache_utils" name="test_gpu_only" file="tests/v1/core/test_kv_cache_utils.py" line="12" time="0.0"><skipped type="pytest.skip" message="requires a GPU">tests/v1/core/test_kv_cache_utils.py:12: requires a GPU</skipped></testcase>
<testcase classname="" name="tests.v1.core.test_broken" time="0.0"><error message="collection failure">ImportError while importing test module</error></testcase>
</testsuite></testsuites>
"""


def _swap(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


def test_junit_outcomes_and_ids_are_pytest_node_ids() -> None:
    results = parse_junit(STOCK)
    assert results["tests/v1/core/test_scheduler.py::test_add_requests"].outcome == "passed"
    assert "tests/v1/core/test_scheduler.py::test_preempt[1.5-True]" in results
    assert results["tests/v1/core/test_scheduler.py::TestStop::test_stop"].outcome == "passed"
    failed = results["tests/v1/core/test_scheduler.py::test_multimodal"]
    assert failed == TestOutcome(
        outcome="failed",
        reason="needs the model llava-hf/llava-1.5-7b-hf (not in the offline Hugging Face cache)",
        could_not_run=True,
    )
    fixture = results["tests/v1/core/test_kv_cache_utils.py::test_warns"]
    assert (fixture.outcome, fixture.could_not_run) == ("error", True)
    assert "caplog_vllm" in fixture.reason
    skipped = results["tests/v1/core/test_kv_cache_utils.py::test_gpu_only"]
    assert (skipped.outcome, skipped.reason, skipped.could_not_run) == (
        "skipped",
        "needs a GPU",
        True,
    )
    assert results["tests.v1.core.test_broken"].outcome == "error"
    assert counts(results) == {"passed": 3, "failed": 2, "error": 2, "skipped": 1}


def test_a_test_reported_twice_keeps_its_worst_outcome() -> None:
    twice = _swap(
        STOCK,
        "</testsuite>",
        '<testcase classname="tests.v1.core.test_scheduler" name="test_add_requests" '
        'file="tests/v1/core/test_scheduler.py"><error message="failed on teardown with '
        '&quot;RuntimeError: leaked&quot;">boom</error></testcase></testsuite>',
    )
    assert (
        parse_junit(twice)["tests/v1/core/test_scheduler.py::test_add_requests"].outcome == "error"
    )


def test_the_same_outcomes_match_and_failures_on_both_group_by_reason() -> None:
    result = compare(parse_junit(STOCK), parse_junit(STOCK))
    assert result.differences == ()
    assert result.passed_on_both == 3
    top = result.failing_on_both[0]
    assert top.test_ids == (
        "tests/v1/core/test_scheduler.py::test_multimodal",
        "tests/v1/core/test_scheduler.py::test_multimodal_chunks",
    )
    assert top.could_not_run and top.other_reason == ()
    assert [len(g.test_ids) for g in result.failing_on_both] == [2, 1, 1]
    assert [g.reason for g in result.skipped_on_both] == ["needs a GPU"]
    assert {g.reason for g in result.could_not_run} >= {"needs a GPU", top.reason}


def test_an_outcome_that_changes_or_vanishes_is_a_difference() -> None:
    # the candidate's scheduler breaks one test, hangs in another, and one test is not reported
    candidate = _swap(
        STOCK,
        'name="test_add_requests" file="tests/v1/core/test_scheduler.py" line="40" time="0.01" />',
        'name="test_add_requests" file="tests/v1/core/test_scheduler.py" line="40" time="0.01">'
        '<failure message="AssertionError: assert 0 == 2">assert 0 == 2</failure></testcase>',
    )
    candidate = _swap(
        candidate,
        'name="test_preempt[1.5-True]" file="tests/v1/core/test_scheduler.py" line="88" time="0.02" />',
        'name="test_preempt[1.5-True]" file="tests/v1/core/test_scheduler.py" line="88" time="120">'
        '<failure message="Failed: Timeout (&gt;120.0s) from pytest-timeout.">+++ Timeout +++'
        "</failure></testcase>",
    )
    candidate = _swap(
        candidate, '<testcase classname="tests.v1.core.test_scheduler.TestStop"', "<ignored"
    )
    result = compare(parse_junit(STOCK), parse_junit(candidate))
    changed = {
        d.test_id: (d.stock.outcome, d.candidate.outcome, d.candidate.reason)
        for d in result.differences
    }
    assert changed == {
        "tests/v1/core/test_scheduler.py::test_add_requests": (
            "passed",
            "failed",
            "AssertionError: assert 0 == 2",
        ),
        "tests/v1/core/test_scheduler.py::test_preempt[1.5-True]": (
            "passed",
            "failed",
            "timed out after 120.0 s",
        ),
        "tests/v1/core/test_scheduler.py::TestStop::test_stop": (
            "passed",
            "absent",
            "not reported by this run",
        ),
    }
    assert result.passed_on_both == 0


def test_a_failure_on_both_for_another_reason_is_named() -> None:
    start = STOCK.index('<error message="failed on setup')
    element = STOCK[start : STOCK.index("</error>", start) + len("</error>")]
    candidate = _swap(STOCK, element, "<error message=\"KeyError: 'policy'\">boom</error>")
    result = compare(parse_junit(STOCK), parse_junit(candidate))
    (group,) = [g for g in result.failing_on_both if "caplog_vllm" in g.reason]
    assert group.other_reason == ("tests/v1/core/test_kv_cache_utils.py::test_warns",)


def test_a_real_pytest_run_reads_back_with_its_node_ids(tmp_path: Path) -> None:
    (tmp_path / "test_small.py").write_text(
        "import pytest\n\n"
        "def test_ok():\n    pass\n\n"
        "@pytest.mark.parametrize('n', [1, 2])\ndef test_param(n):\n    assert n == 1\n\n"
        "class TestGroup:\n    def test_inner(self):\n        pytest.skip('no GPU here')\n",
        encoding="utf-8",
    )
    (tmp_path / "none.ini").write_text("[pytest]\n", encoding="utf-8")
    junit = tmp_path / "out.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "test_small.py", "-q", "-p", "no:cacheprovider",
         "--junitxml", str(junit), "-o", "junit_family=xunit1", "--rootdir", str(tmp_path),
         "-c", str(tmp_path / "none.ini")],
        cwd=tmp_path, capture_output=True, check=False, timeout=60,
    )  # fmt: skip
    results = parse_junit(junit.read_text(encoding="utf-8"))
    assert {k: v.outcome for k, v in results.items()} == {
        "test_small.py::test_ok": "passed",
        "test_small.py::test_param[1]": "passed",
        "test_small.py::test_param[2]": "failed",
        "test_small.py::TestGroup::test_inner": "skipped",
    }
    assert results["test_small.py::TestGroup::test_inner"].reason == "no GPU here"


def test_reasons_name_what_is_missing() -> None:
    assert explain("ModuleNotFoundError: No module named 'tblib'") == (
        "needs the module tblib (not installed)",
        True,
    )
    assert explain("LocalEntryNotFoundError: Cannot find an appropriate cached snapshot")[1]
    assert explain("RuntimeError: Torch not compiled with CUDA enabled") == ("needs a GPU", True)
    assert explain("", "line one\nline two") == ("line one", False)
    assert explain("x" * 500)[0] == "x" * 160


def _sdist(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-0.32.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


SDIST = {
    "tests/v1/core/utils.py": "def create_scheduler(): ...\n",
    "tests/v1/core/test_scheduler.py": "def test_x(): pass\n",
    "pyproject.toml": "[tool.pytest.ini_options]\nmarkers = ['slow_test']\n",
    "vllm/__init__.py": "",
    "csrc/kernel.cu": "",
}


def _pypi(
    archive: bytes, *, release_json: bool = True, sha256: str | None = None
) -> httpx.MockTransport:
    """PyPI as it answers: the release's JSON (or only the project's), and the file; the
    sdist's URL relative to the JSON's, as some mirrors give it."""

    def files(relative: str) -> list[dict[str, object]]:
        digest = sha256 or hashlib.sha256(archive).hexdigest()
        return [
            {"packagetype": "bdist_wheel", "url": "https://x/vllm.whl", "digests": {"sha256": ""}},
            {"packagetype": "sdist", "url": relative, "digests": {"sha256": digest}},
        ]

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/pypi/vllm/0.32.0/json" and release_json:
            return httpx.Response(200, json={"urls": files("../../../files/vllm-0.32.0.tar.gz")})
        if path == "/pypi/vllm/json":
            releases = {"0.32.0": files("../../files/vllm-0.32.0.tar.gz")}
            return httpx.Response(200, json={"releases": releases})
        if path == "/files/vllm-0.32.0.tar.gz":
            return httpx.Response(200, content=archive)
        return httpx.Response(404)

    return httpx.MockTransport(handler)


def _offline(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("Name or service not known", request=request)


@pytest.mark.parametrize("release_json", [True, False])
def test_the_sdist_yields_only_its_tests_and_is_cached(tmp_path: Path, release_json: bool) -> None:
    transport = _pypi(_sdist(SDIST), release_json=release_json)
    tree = cached_tests(tmp_path, "0.32.0", transport)
    assert tree == tmp_path / "0.32.0"
    kept = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
    assert kept == ["pyproject.toml", "tests/v1/core/test_scheduler.py", "tests/v1/core/utils.py"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.32.0"]  # no scratch left
    # offline now: the cache answers
    assert cached_tests(tmp_path, "0.32.0", httpx.MockTransport(_offline)) == tree


def test_offline_without_a_cache_is_one_line_saying_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as info:
        cached_tests(tmp_path, "0.32.0", httpx.MockTransport(_offline))
    assert "cannot fetch vLLM 0.32.0's tests from PyPI (ConnectError" in info.value.message
    assert "--vllm-tests DIR" in info.value.hint and str(tmp_path) in info.value.hint
    assert not (tmp_path / "0.32.0").exists()


def test_a_download_that_does_not_match_its_sha256_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="does not match PyPI's sha256"):
        cached_tests(tmp_path, "0.32.0", _pypi(_sdist(SDIST), sha256="0" * 64))
    assert not (tmp_path / "0.32.0").exists()


def test_a_release_without_an_sdist_is_refused(tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"urls": [{"packagetype": "bdist_wheel", "url": "x"}]})

    with pytest.raises(EngineError, match=r"no vLLM 0\.32\.0 sdist"):
        cached_tests(tmp_path, "0.32.0", httpx.MockTransport(handler))


def test_local_versions_map_to_their_release() -> None:
    assert release_of("0.32.0+cpu") == "0.32.0"
    assert release_of("0.31.0") == "0.31.0"


def test_the_offline_hub_holds_the_create_scheduler_model(tmp_path: Path) -> None:
    assert write_offline_hub(tmp_path) == ("facebook/opt-125m",)
    repo = tmp_path / "models--facebook--opt-125m"
    snapshot = (repo / "refs" / "main").read_text(encoding="utf-8")
    config = json.loads((repo / "snapshots" / snapshot / "config.json").read_text(encoding="utf-8"))
    assert (config["architectures"], config["max_position_embeddings"]) == (
        ["OPTForCausalLM"],
        2048,
    )


def test_conftest_blockers_are_its_top_level_imports_missing_here(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(
        "import json\nfrom tblib_not_here import pickling_support\nfrom tests.models import x\n"
        "def f():\n    import also_not_here\n",
        encoding="utf-8",
    )
    assert conftest_blockers(tmp_path) == ("tblib_not_here",)
    assert conftest_blockers(tmp_path / "nowhere") == ()


def test_additional_config_is_a_json_object() -> None:
    assert parse_additional_config(None, None) == json.loads(DEFAULT_CONFIG)
    assert parse_additional_config(None, "my.sched.Mine") == {}
    assert parse_additional_config('{"a": 1}', None) == {"a": 1}
    for bad in ("{bad", "[1]"):
        with pytest.raises(EngineError):
            parse_additional_config(bad, None)


def _report(comparison: Comparison, swapped: int, matches: bool) -> ConformanceReport:
    run = RunSummary(
        scheduler_class="vllm.v1.core.sched.scheduler.Scheduler", junit_file="stock.junit.xml",
        log_file="stock.log", exit_code=1, wall_s=90.0, counts={"passed": 3, "failed": 2},
    )  # fmt: skip
    return ConformanceReport(
        vllm_version="0.32.0", tree="/x", tests=("tests/v1/core",), additional_config={},
        conftest="loaded", hub_stand_ins=("facebook/opt-125m",), stock=run, candidate=run,
        schedulers=(
            SchedulersBuilt(test_file="tests/v1/core/test_scheduler.py", swapped=swapped,
                            not_swapped=2, other_classes=("vllm.v1.core.sched.scheduler.Scheduler",)),
        ),
        comparison=comparison, matches=matches,
    )  # fmt: skip


def test_the_report_round_trips_and_its_verdict_is_consistent() -> None:
    same = compare(parse_junit(STOCK), parse_junit(STOCK))
    report = _report(same, swapped=4, matches=True)
    assert ConformanceReport.model_validate_json(report.model_dump_json()) == report
    with pytest.raises(ValueError, match="matches must be"):
        _report(same, swapped=0, matches=True)  # nothing built the candidate: nothing proven
    lines = conformance_lines(report)
    assert "     2  tests/v1/core/test_scheduler.py (Scheduler)" in lines
    assert lines[-1].startswith("verdict: the candidate matches stock test by test")
    assert any(
        "could not run here: needs the model llava-hf/llava-1.5-7b-hf" in line for line in lines
    )
    assert "verdict: nothing compared" in conformance_lines(_report(same, 0, False))[-1]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--additional-config", "{bad"), "--additional-config is not JSON"),
        (("--additional-config", "[1]"), "must be a JSON object"),
    ],
)
def test_bad_input_is_one_red_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    done = kit("engine", "conformance", *args, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_command_has_help() -> None:
    done = kit("engine", "conformance", "--help")
    assert done.returncode == 0, done.stderr
    assert "[SCHEDULER_CLASS]" in done.stdout and "--additional-config" in done.stdout
