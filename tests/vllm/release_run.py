"""Small twin scenarios run by a vLLM release's own interpreter (`twin@RELEASE` environments).

A scenario is a Python script: `twin_script` puts in front of its body a twin over 24 blocks of
16 tokens with the OffloadingConnector, its scheduler (`sched`), a clock (`t`), `words(tag, n)`
and `run(requests)` (add them, step until nothing is left or 20 engine s pass; True when all
finished); the body prints one JSON line last. `run_in_release` runs it in the release's
environment (skipped, with the command that builds it, where that is not built) and returns
that line.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from stallkit.engine.twin.release.env import ReleaseEnv
from tests.vllm.twin_kv_support import REPO

_HEAD = """
import json, sys
from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.core import TwinEngine
kv = {{"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}}
engine = TwinEngine(TwinConfig(
    num_blocks=24, block_size=16, max_num_seqs=4, max_num_batched_tokens=256,
    max_model_len=2048, empty_step_s=0.002, kv_transfer_config=kv,
    kv_seconds_per_block={seconds_per_block}, kv_host_blocks=512{extra}))
sched, t = engine._sched, 0.0
words = lambda tag, n: [f"{{tag}}{{i}}" for i in range(n)]

def run(requests):
    global t
    for rid, prompt, out in requests:
        engine.add_request(rid, prompt, out, t)
    end = t + 20
    while engine.has_work() and t < end:
        t = engine.advance(t, t + 0.01).now_s
    return not engine.has_work()
"""


def twin_script(body: str, seconds_per_block: float = 0.02, extra: str = "") -> str:
    """`body` after the shared twin set-up; `extra` adds TwinConfig arguments (`, name=value`)."""
    return _HEAD.format(seconds_per_block=seconds_per_block, extra=extra) + body


def run_in_release(release: str, script: str, *args: str) -> dict[str, Any]:
    """The last line `script` prints, as JSON, run by `release`'s environment."""
    env = ReleaseEnv(release)
    if not env.built:
        pytest.skip(
            f"vLLM {release}'s environment is not built (kit engine release build {release})"
        )
    done = subprocess.run(
        [str(env.python), "-c", script, *args],
        capture_output=True, text=True, timeout=170, cwd=REPO, check=True,
        env={**os.environ, "STALLKIT_SOURCE_ROOT": str(REPO)},
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
