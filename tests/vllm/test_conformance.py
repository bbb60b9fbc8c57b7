"""`kit engine conformance` on the installed vLLM: the plugin against stock, in vLLM's own tests.

The release's tests come through the command's own cache (its PyPI sdist, fetched once per
machine); with PyPI out of reach and nothing cached the tests are skipped with the reason.
CI runs the files in which `create_scheduler` builds the candidate: all 138 swapped tests of
0.32.0's `tests/v1/core`, for `fix` (base's run is nightly: `STALLKIT_FULL_CONFORMANCE=1`). The whole directory takes about twice as long (two runs of 100-200 s
on two busy cores) for tests of the KV cache utilities that build no scheduler.

`base` matches stock too, test by test: in 0.32.0's `tests/v1/core` the scheduler preempts
nine times, each in an uncontended decode step, so the prefill-turn veto that livelocks `base`
is never asked. The livelock itself is `test_patched_scheduler.py`'s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stallkit.engine.conformance.fetch import cached_tests, installed_vllm_version, release_of
from stallkit.engine.conformance.run import DEFAULT_CACHE, ConformanceReport
from stallkit.engine.errors import EngineError
from stallkit.engine.vllm_plugin.config import PatchedConfig
from tests.machine import scaled
from tests.support import kit
from tests.vllm.conftest import HAVE_VLLM, VLLM_MISSING

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not HAVE_VLLM, reason=VLLM_MISSING)]

PLUGIN = "stallkit.engine.vllm_plugin.scheduler.PatchedScheduler"
#: every tests/v1/core file of 0.32.0 in which create_scheduler builds the candidate
SWAPPED_FILES = (
    "test_scheduler.py",
    "test_prefix_caching.py",
    "test_prefix_replay.py",
    "test_deferred_block_free.py",
    "test_swa_inflight_window_free.py",
    "test_worker_slot_overflow.py",
)
#: two pytest runs at once, each importing vLLM and its tests before running them
LIMIT_S = 900
#: set to 1 to also run base's conformance (the nightly job does; CI runs fix's only)
FULL_ENV = "STALLKIT_FULL_CONFORMANCE"


@pytest.fixture(scope="module")
def vllm_tests() -> Path:
    """The installed release's tests, through the command's cache."""
    installed = installed_vllm_version()
    assert installed is not None
    cache = Path(os.environ.get("STALLKIT_VLLM_TESTS_CACHE") or DEFAULT_CACHE)
    try:
        return cached_tests(cache, release_of(installed))
    except EngineError as exc:
        pytest.skip(f"vLLM's tests are not cached and cannot be fetched: {exc.message}")


def _conformance(policy: str, tree: Path, out: Path) -> tuple[int, ConformanceReport, str]:
    config = PatchedConfig(policy=policy, prefill_compute_share=0.4)  # type: ignore[arg-type]
    names = [name for name in SWAPPED_FILES if (tree / "tests" / "v1" / "core" / name).is_file()]
    tests = [arg for name in names for arg in ("--tests", f"tests/v1/core/{name}")]
    done = kit(
        "engine", "conformance", PLUGIN, "--additional-config", config.to_additional_config(),
        "--vllm-tests", str(tree), "--out", str(out), *tests, timeout=LIMIT_S - 30,
    )  # fmt: skip
    assert (out / "conformance.json").is_file(), done.stdout + done.stderr
    report = ConformanceReport.model_validate_json((out / "conformance.json").read_text())
    return done.returncode, report, done.stdout + done.stderr


@pytest.mark.timeout(LIMIT_S)
def test_the_fix_policy_matches_stock_test_by_test(vllm_tests: Path, tmp_path: Path) -> None:
    code, report, output = _conformance("fix", vllm_tests, tmp_path / "fix")
    assert code == 0, output
    assert report.matches and report.comparison.differences == (), output
    swapped = {f.test_file: f.swapped for f in report.schedulers}
    assert swapped["tests/v1/core/test_scheduler.py"] > 0, swapped
    assert report.comparison.passed_on_both > 0
    assert report.candidate.scheduler_class == PLUGIN
    assert (
        json.loads(PatchedConfig(policy="fix").to_additional_config()) == report.additional_config
    )
    assert (tmp_path / "fix" / "stock.junit.xml").is_file()
    assert (tmp_path / "fix" / "candidate.junit.xml").is_file()
    assert "verdict: the candidate matches stock test by test" in output


@pytest.mark.timeout(LIMIT_S)
@pytest.mark.skipif(
    os.environ.get(FULL_ENV) != "1",
    reason=f"a second pair of vLLM test runs (1-2.5 min): nightly, or set {FULL_ENV}=1",
)
def test_the_base_policy_matches_stock_too(vllm_tests: Path, tmp_path: Path) -> None:
    """vLLM's tests never reach the veto that livelocks base (see the module's docstring)."""
    code, report, output = _conformance("base", vllm_tests, tmp_path / "base")
    assert code == 0, output
    assert report.comparison.differences == (), output
    assert report.swapped_tests > 0


@pytest.mark.wallclock
@pytest.mark.timeout(600)
def test_offline_without_the_cache_is_one_line_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PyPI through a proxy that refuses: as a machine without network sees it
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    out = tmp_path / "out"
    # it imports vLLM's scheduler to check the class first: 12 CPU s on the reference machine
    where = ["--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    done = kit("engine", "conformance", *where, timeout=scaled(120))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot fetch vLLM" in done.stderr and "--vllm-tests DIR" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()
