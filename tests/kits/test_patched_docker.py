"""The patched scheduler inside a stock vLLM image: the exact `docker run` arguments per arm.

Both arms of the gpu-patched-docker kit run one image; the plugin comes in through the
`--overlay` bind mount and PYTHONPATH, and the arms differ only in the policy. The fake
`docker` on PATH records the calls (a real engine is not started here).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from engine.docker import DockerLauncher, Overlay
from engine.spec import parse_spec
from kits.config import load_kit
from kits.launch import make_launcher

REPO = Path(__file__).resolve().parents[2]
IMAGE = "vllm/vllm-openai:v0.32.0"


def _run_call(state: Path, name: str) -> list[str]:
    calls = [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines()]
    return next(c for c in calls if c[0] == "run" and name in c)


def test_both_arms_run_the_plugin_in_one_stock_image(fake_docker: Path, tmp_path: Path) -> None:
    kit = load_kit("gpu-patched-docker")
    overlay = Overlay.parse(f"{REPO / 'engine'}:/opt/stallkit/engine")
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
        assert f"{REPO / 'engine'}:/opt/stallkit/engine:ro" in run
        assert "PYTHONPATH=/opt/stallkit" in run
        assert "PROMETHEUS_MULTIPROC_DIR=/tmp/stallkit-prometheus" in run
        assert run[run.index("--tmpfs") + 1] == "/tmp/stallkit-prometheus"
        after_image = run[run.index(IMAGE) + 1 :]
        cls = after_image[after_image.index("--scheduler-cls") + 1]
        assert cls == "engine.patched.scheduler.AsyncPatchedScheduler"
        assert "--async-scheduling" in after_image
        config = json.loads(after_image[after_image.index("--additional-config") + 1])
        assert config == {"patched_scheduler": {"policy": arm, "prefill_compute_share": 0.4}}
        assert run[run.index("--gpus") + 1] == '"device=0,1"'


def test_container_cpu_is_read_from_its_cgroup(fake_docker: Path, tmp_path: Path) -> None:
    from engine.docker import parse_cpu_stat

    assert parse_cpu_stat("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n") == 2.5
    assert parse_cpu_stat("user_usec 1\n") is None
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
    assert ["exec", launcher.name, "cat", "/sys/fs/cgroup/cpu.stat"] in calls
