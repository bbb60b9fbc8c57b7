"""The engine image's entrypoint: the fork's env profile mapped onto the engine's command."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from stallkit.engine.image.entrypoint import SIM_CONFIG_PATH, ProfileError, engine_command, main
from stallkit.engine.image.recipe import apt_mirror, stage_package
from stallkit.engine.sim.config import SimConfig

REPO = Path(__file__).resolve().parents[3]


def _restore_stall_env() -> dict[str, str]:
    kit = tomllib.loads((REPO / "kits" / "shipped" / "restore-stall.toml").read_text())
    env: dict[str, str] = kit["engine"]["env"]
    return env


def test_restore_stall_profile_gives_the_simulators_restore_stall_sizes() -> None:
    cmd = engine_command(_restore_stall_env(), "base", "sim", python="/py")
    assert cmd.argv == [
        "/py", "-m", "stallkit.engine.serve", "--host", "0.0.0.0", "--port", "8000",
        "--time-scale", "1.0", "--config", str(SIM_CONFIG_PATH),
    ]  # fmt: skip
    config = SimConfig.model_validate(cmd.sim_config)
    # the kit's [sim.engine] sizes, from the image profile alone
    assert (config.max_num_seqs, config.num_blocks, config.prefill_compute_share) == (4, 319, 0.4)
    assert config.policy == "base" and config.num_gpus == 2
    assert config.host_tier_blocks == 5042  # 60 GB of LMCache CPU memory
    assert config.restore_max_wait_s == 60.0


def test_profile_without_lmcache_has_no_host_tier_and_scale_and_port_apply() -> None:
    env = {"CACHE_MODE": "gpu", "PORT": "9001", "HOST": "127.0.0.1", "STALLKIT_TIME_SCALE": "120"}
    cmd = engine_command(env, "fix", "sim", python="/py", extra_args=["--log-level", "debug"])
    assert cmd.sim_config["host_tier_blocks"] == 0 and cmd.sim_config["policy"] == "fix"
    assert cmd.argv[3:9] == ["--host", "127.0.0.1", "--port", "9001", "--time-scale", "120.0"]
    assert cmd.argv[-2:] == ["--log-level", "debug"]


def test_patched_profile_builds_the_vllm_command_line() -> None:
    env = _restore_stall_env() | {"MODEL": "/models/m", "HOST": "127.0.0.1"}
    cmd = engine_command(env, "fix", "patched", python="/py", extra_args=["--dtype", "float32"])
    argv = cmd.argv
    assert argv[:5] == ["/py", "-m", "vllm.entrypoints.cli.main", "serve", "/models/m"]

    def opt(name: str) -> str:
        return argv[argv.index(name) + 1]

    assert (opt("--host"), opt("--port"), opt("--tensor-parallel-size")) == (
        "127.0.0.1",
        "8000",
        "2",
    )
    assert opt("--decode-context-parallel-size") == "2"
    assert opt("--max-num-seqs") == "4" and opt("--kv-cache-memory-bytes") == "3800000000"
    assert opt("--scheduler-cls") == "stallkit.engine.vllm_plugin.scheduler.PatchedScheduler"
    extra = json.loads(opt("--additional-config"))
    assert extra == {"patched_scheduler": {"policy": "fix", "prefill_compute_share": 0.4}}
    # what the plugin reads back is what the profile said
    from stallkit.engine.vllm_plugin.config import parse_config

    assert parse_config(extra).policy == "fix"
    assert json.loads(opt("--kv-transfer-config"))["kv_connector"] == "LMCacheConnectorV1"
    assert argv[-2:] == ["--dtype", "float32"]
    assert "--no-async-scheduling" in argv
    assert cmd.sim_config == {}
    # STALLKIT_ENGINE picks the engine at run time; without LMCache there is no connector
    plain = engine_command({"MODEL": "/m", "STALLKIT_ENGINE": "patched"}, "base", "sim")
    assert "--kv-transfer-config" not in plain.argv
    assert "--decode-context-parallel-size" not in plain.argv


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MAX_NUM_SEQS": "lots"}, "MAX_NUM_SEQS='lots' is not a whole number"),
        ({"MAX_NUM_SEQS": "0"}, "MAX_NUM_SEQS=0 must be at least 1"),
        ({"PREFILL_COMPUTE_SHARE": "high"}, "PREFILL_COMPUTE_SHARE='high' is not a number"),
        ({"CACHE_MODE": "redis"}, "CACHE_MODE='redis' is not one of"),
        ({"CACHE_MODE": "lmcache", "LMCACHE_MODE": "on_write"}, "only on_evict"),
        ({"CACHE_MODE": "lmcache", "LMCACHE_LOCAL_CPU": "maybe"}, "is not true or false"),
        ({"STALLKIT_ENGINE": "tgi"}, "is not sim or patched"),
        ({"STALLKIT_ENGINE": "patched"}, "MODEL is not set"),
    ],
)
def test_bad_profile_values_are_one_clear_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(ProfileError, match=message.replace("(", r"\(")):
        engine_command(env, "base", "sim")


def test_main_exits_2_with_one_line_on_a_bad_profile(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MAX_NUM_SEQS", "-3")
    assert main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["stallkit-image: error: MAX_NUM_SEQS=-3 must be at least 1"]


def test_staged_package_bakes_the_policy(tmp_path: Path) -> None:
    package = stage_package(tmp_path, "fix")
    baked = (package / "image" / "baked.py").read_text()
    assert 'POLICY = "fix"' in baked and 'ENGINE = "sim"' in baked
    assert (package / "sim" / "scheduler.py").is_file()
    assert not list(package.rglob("__pycache__"))


def test_apt_mirror_reads_deb822_and_one_line_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
    )
    assert apt_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text(
        "deb [arch=amd64] http://other.example/d bookworm main\n"
    )
    assert apt_mirror(tmp_path) == "http://other.example/d"
    assert apt_mirror(tmp_path / "nothing") == "http://deb.debian.org/debian"


def test_image_command_without_a_daemon_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stallkit",
            "engine",
            "image",
            "t:base",
            "--cache-dir",
            str(tmp_path),
            "--docker-host",
            f"unix://{tmp_path}/no-daemon.sock",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ")
    assert "docker" in done.stderr and len(done.stderr.strip().splitlines()) <= 2
    assert not list(tmp_path.iterdir()), "nothing is built before a daemon answers"
    bad = subprocess.run(
        [sys.executable, "-m", "stallkit", "engine", "image", "t:x", "--policy", "better"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert bad.returncode == 2 and "use --policy base|fix" in bad.stderr
