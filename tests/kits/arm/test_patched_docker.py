"""The patched scheduler inside a stock vLLM image: the exact `docker run` arguments per arm.

Both arms of the gpu-patched-docker kit run one image; the plugin comes in through the
`--overlay` bind mount and PYTHONPATH, and the arms differ only in the policy. The fake
`docker` on PATH records the calls (a real engine is not started here).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from stallkit.engine.launch.docker import DockerLauncher, Overlay
from stallkit.engine.spec import parse_spec
from stallkit.kits.arm.launchers import make_launcher
from stallkit.kits.kit import load_kit

REPO = Path(__file__).resolve().parents[3]
IMAGE = "vllm/vllm-openai:v0.32.0"


def _run_call(state: Path, name: str) -> list[str]:
    calls = [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines()]
    return next(c for c in calls if c[0] == "run" and name in c)


def test_both_arms_run_the_plugin_in_one_stock_image(fake_docker: Path, tmp_path: Path) -> None:
    kit = load_kit("gpu-patched-docker")
    overlay = Overlay.parse(f"{REPO / 'engine'}:/opt/stallkit/stallkit/engine")
    for arm in ("base", "fix"):
        launcher = make_launcher(arm, parse_spec(IMAGE), kit, tmp_path / arm, [overlay])
        assert isinstance(launcher, DockerLauncher)
        try:
            launcher.start()
            launcher.wait_healthy(60)
            assert httpx.get(f"{launcher.url}/health").status_code == 200
        finally:
            launcher.stop()
        run = _run_call(fake_docker, launcher.name)
        assert f"{REPO / 'engine'}:/opt/stallkit/stallkit/engine:ro" in run
        assert "PYTHONPATH=/opt/stallkit" in run
        assert "PROMETHEUS_MULTIPROC_DIR=/tmp/stallkit-prometheus" in run
        assert run[run.index("--tmpfs") + 1] == "/tmp/stallkit-prometheus"
        after_image = run[run.index(IMAGE) + 1 :]
        cls = after_image[after_image.index("--scheduler-cls") + 1]
        assert cls == "stallkit.engine.vllm_plugin.scheduler.AsyncPatchedScheduler"
        assert "--async-scheduling" in after_image
        assert after_image[after_image.index("--port") + 1] == "8000"
        config = json.loads(after_image[after_image.index("--additional-config") + 1])
        assert config == {"patched_scheduler": {"policy": arm, "prefill_compute_share": 0.4}}
        assert run[run.index("--gpus") + 1] == '"device=0,1"'


def test_container_cpu_is_read_from_its_cgroup(fake_docker: Path, tmp_path: Path) -> None:
    from stallkit.engine.launch.docker import parse_cpu_stat

    assert parse_cpu_stat("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n") == 2.5
    assert parse_cpu_stat("user_usec 1\n") is None
    # cgroup v1: cpuacct.usage in nanoseconds (cat's error for the missing cpu.stat is on stderr)
    assert parse_cpu_stat("26298626\n") == 0.026298626
    kit = load_kit("gpu-patched-docker")
    launcher = make_launcher("base", parse_spec(IMAGE), kit, tmp_path / "base")
    assert isinstance(launcher, DockerLauncher)
    assert launcher.cpu_seconds() is None  # not started: nothing asked
    try:
        launcher.start()
        launcher.wait_healthy(60)
        # the fake docker has no `exec`: the reading is unknown, never an error
        assert launcher.cpu_seconds() is None
    finally:
        launcher.stop()
    calls = [json.loads(line) for line in (fake_docker / "calls.jsonl").read_text().splitlines()]
    cpu_files = ["/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/cpuacct/cpuacct.usage"]
    assert ["exec", launcher.name, "cat", *cpu_files] in calls


def test_cpu_kit_runs_the_plugin_in_a_stock_image_on_the_host_network(tmp_path: Path) -> None:
    # the arguments the real-container test (tests/docker) runs, checked exactly, per arm
    from stallkit.engine.launch.docker import docker_run_argv

    kit = load_kit("cpu-patched-docker")
    overlays = [
        Overlay.parse(f"{REPO / 'engine'}:/opt/stallkit/stallkit/engine"),
        Overlay.parse(f"{REPO / 'contract'}:/opt/stallkit/stallkit/contract"),
        Overlay.parse(f"{tmp_path}:/models/tiny"),
    ]
    for arm in ("base", "fix"):
        launcher = make_launcher(arm, parse_spec(IMAGE), kit, tmp_path / arm, overlays)
        assert isinstance(launcher, DockerLauncher)
        run = docker_run_argv(IMAGE, launcher.name, launcher.opts)
        assert run[run.index("--network") + 1] == "host" and "--publish" not in run
        assert "--gpus" not in run and "--ipc=host" not in run
        assert f"{REPO / 'engine'}:/opt/stallkit/stallkit/engine:ro" in run
        assert f"{REPO / 'contract'}:/opt/stallkit/stallkit/contract:ro" in run
        assert f"{tmp_path}:/models/tiny:ro" in run
        port = launcher.opts.host_port
        assert launcher.url == f"http://127.0.0.1:{port}"
        env = dict(run[i + 1].split("=", 1) for i, a in enumerate(run) if a == "--env")
        assert env["PYTHONPATH"] == "/opt/stallkit"
        assert env["PROMETHEUS_MULTIPROC_DIR"] == "/tmp/stallkit-prometheus"
        assert run[run.index("--tmpfs") + 1] == "/tmp/stallkit-prometheus"
        after_image = run[run.index(IMAGE) + 1 :]
        # vLLM's own server takes its port as an argument: `{port}` is the engine's port
        assert after_image[after_image.index("--port") + 1] == str(port)
        assert after_image[after_image.index("--host") + 1] == "127.0.0.1"
        assert after_image[after_image.index("--model") + 1] == "/models/tiny"
        assert after_image[after_image.index("--dtype") + 1] == "float32"
        assert "--enforce-eager" in after_image and "--no-async-scheduling" in after_image
        cls = after_image[after_image.index("--scheduler-cls") + 1]
        assert cls == "stallkit.engine.vllm_plugin.scheduler.PatchedScheduler"
        config = json.loads(after_image[after_image.index("--additional-config") + 1])
        assert config == {"patched_scheduler": {"policy": arm, "prefill_compute_share": 0.9}}
    # the plugin comes in as in the nightly job's gpu-patched-docker kit
    gpu = load_kit("gpu-patched-docker")
    for key in ("PYTHONPATH", "PROMETHEUS_MULTIPROC_DIR"):
        assert kit.engine.env[key] == gpu.engine.env[key]
    assert kit.engine.docker_args == gpu.engine.docker_args
    assert kit.engine.arm_engine_args.keys() == gpu.engine.arm_engine_args.keys()
    # the sizes are the cpu-patched kit's (the one real vLLM on CPU livelocks with)
    local = load_kit("cpu-patched")
    assert kit.load == local.load and kit.monitor == local.monitor
    shared = after_image[after_image.index("--enforce-eager") :]
    for flag in ("--max-num-seqs", "--block-size", "--num-gpu-blocks-override", "--max-model-len"):
        local_args = local.engine.engine_args
        assert shared[shared.index(flag) + 1] == local_args[local_args.index(flag) + 1], flag


def test_port_placeholder_is_the_port_the_engine_listens_on() -> None:
    from stallkit.engine.launch.docker import DockerOptions, docker_run_argv

    args = ("--port", "{port}", '{"a":{"port":1}}')
    published = DockerOptions(container_port=9000, host_port=18000, engine_args=args)
    assert docker_run_argv("img", "n", published)[-3:] == ["--port", "9000", '{"a":{"port":1}}']
    host = DockerOptions(network="host", container_port=9000, host_port=18000, engine_args=args)
    assert docker_run_argv("img", "n", host)[-3:] == ["--port", "18000", '{"a":{"port":1}}']
