"""The local vLLM launcher's environment: caches in the run directory, short IPC paths."""

from __future__ import annotations

from pathlib import Path

from stallkit.engine.launch.vllm import ipc_base_dir, vllm_env


def test_caches_and_temp_files_go_under_the_work_dir(tmp_path: Path) -> None:
    env = vllm_env(tmp_path, base={"PATH": "/usr/bin"})
    for key in ("VLLM_CACHE_ROOT", "HF_HOME", "TMPDIR", "XDG_CACHE_HOME"):
        assert env[key].startswith(str(tmp_path)), key
    assert env["HF_HUB_OFFLINE"] == "1" and env["PATH"] == "/usr/bin"
    assert env["VLLM_RPC_BASE_PATH"] == env["TMPDIR"]


def test_a_deep_run_dir_gets_a_short_ipc_dir(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / "run" / "tmp"
    ipc = ipc_base_dir(deep)
    assert ipc is not None
    try:
        assert ipc.is_dir()
        # vLLM binds `<base>/<uuid4>`: it must fit a unix socket path (107 bytes)
        assert len(f"{ipc}/{'0' * 36}") <= 107
        assert vllm_env(tmp_path, ipc_dir=ipc)["VLLM_RPC_BASE_PATH"] == str(ipc)
    finally:
        ipc.rmdir()
    assert ipc_base_dir(Path("/r/tmp")) is None
