"""`kit ab` and `kit run` on real engine images: the fix overlaid on the base image, two
images on two docker hosts in parallel, and Ctrl-C / SIGTERM / errors leaving no container
of ours (`docker ps -a`).

The arms run the restore-stall kit's env profile on a simulator image at 60-120 engine
seconds per wall second: half an hour of engine time takes 15-30 s per arm.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.docker.docker_support import (
    REPO,
    DockerHosts,
    Images,
    ours,
    run_kit,
    wait_for,
    write_kit,
)

# the first docker test also waits for the session's image build (minutes without a cache)
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(420), pytest.mark.wallclock]

OVERLAY_DEST = "/opt/stallkit/stallkit/engine"


def _kit(*args: str) -> subprocess.CompletedProcess[str]:
    return run_kit(*args, timeout_s=240)


def _assert_ab(out: Path) -> dict[str, dict[str, object]]:
    """What an A/B over HTTP shows whatever the request timing: the fix (which cannot
    livelock) never stalls and runs its whole duration; a base stall, when the timing gives
    one, is the spinning kind, and the run ended by the monitor exactly when one was stopped. (The livelock itself is asserted on the
    simulator's deterministic clock, in tests/engine.)"""
    data = json.loads((out / "ab.json").read_text())
    base, fix = data["arms"]["base"], data["arms"]["fix"]
    assert fix["stalls"] == []
    assert fix["end_reason"] == "duration" and fix["turns"] > 0
    assert all(s["kind"] == "spinning" for s in base["stalls"]), base["stalls"]
    # a stall that begins within stop_after of the run's end is not stopped: the run ends first
    stopped = any(s["stopped_run"] for s in base["stalls"])
    assert stopped == (base["end_reason"] == "stall_stop"), base
    arms: dict[str, dict[str, object]] = data["arms"]
    return arms


def _policy(arm_dir: Path) -> str:
    """The scheduler policy the arm's engine said it serves (its start-up line)."""
    text = (arm_dir / "engine.log").read_text()
    return text.split("serving on ", 1)[1].split("policy=", 1)[1].split()[0]


def test_fix_overlaid_on_the_base_image_runs_the_fix(
    docker_hosts: DockerHosts, engine_images: Images, tmp_path: Path
) -> None:
    # the base scheduler on the simulator (served over HTTP, like the image), against the base
    # image with the fix's source tree overlaid read-only (an overlay goes into image arms only)
    tree = _kit("engine", "image", "unused:tag", "--policy", "fix", "--tree", str(tmp_path / "src"))
    assert tree.returncode == 0, tree.stderr
    kit = write_kit(tmp_path / "kit.toml", docker_hosts, duration_s=1800)
    out = tmp_path / "ab"
    done = _kit(
        "ab", "--kit", str(kit), "--base", "sim:base", "--fix", engine_images.base,
        "--clock", "wall", "--seeds", "1",
        "--overlay", f"{tree.stdout.strip()}:{OVERLAY_DEST}", "--no-dashboard", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_ab(out)
    # the overlay makes the base image's engine schedule with the fix
    assert (_policy(out / "base"), _policy(out / "fix")) == ("base", "fix")
    assert "profile restore-stall, policy fix" in (out / "fix" / "engine.log").read_text()
    assert "A/B: docker-test" in done.stdout
    assert ours(docker_hosts.a) == []


def _ab_watching_hosts(
    hosts: dict[str, str], *args: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, set[str]]]:
    """Run `kit ab ARGS`, noting which of our containers each host runs meanwhile."""
    done: list[subprocess.CompletedProcess[str]] = []
    worker = threading.Thread(target=lambda: done.append(_kit("ab", *args)))
    worker.start()
    seen: dict[str, set[str]] = {name: set() for name in hosts}
    while worker.is_alive():
        for name, host in hosts.items():
            seen[name].update(ours(host))
        worker.join(timeout=0.5)
    assert done, "kit ab did not return"
    return done[0], seen


def test_two_images_on_two_docker_hosts_in_parallel(
    docker_hosts: DockerHosts, engine_images: Images, tmp_path: Path
) -> None:
    # base on host a, fix on host b (which holds only the fix image), both at once
    b = {"docker_host": docker_hosts.b, "dcgm_url": "{engine_url}/dcgm/metrics"}
    # two engines and 24 agents at once: a lower scale, so neither falls far behind its clock
    kit = write_kit(
        tmp_path / "kit.toml", docker_hosts, duration_s=1800, time_scale=60.0, arm_hosts={"fix": b}
    )
    out = tmp_path / "ab"
    done, seen = _ab_watching_hosts(
        {"a": docker_hosts.a, "b": docker_hosts.b},
        "--kit", str(kit), "--base", engine_images.base, "--fix", engine_images.fix,
        "--parallel", "--no-dashboard", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_ab(out)
    assert (_policy(out / "base"), _policy(out / "fix")) == ("base", "fix")
    for arm in ("base", "fix"):
        meta = json.loads((out / arm / "meta.json").read_text())
        assert meta["end_reason"] in ("duration", "stall_stop"), meta
        # GPU readings came through each host's DCGM URL (the simulator's, TP=2: two GPUs)
        lines = (out / arm / "timeline.jsonl").read_text().splitlines()
        gpu = [json.loads(line) for line in lines if '"type":"gpu"' in line.replace(" ", "")]
        assert gpu and all(set(g["util"]) == {"0", "1"} for g in gpu)
        assert any(g["util"]["0"] > 0 for g in gpu)
    # each arm's container ran on its own host, and none is left on either
    assert len(seen["a"]) == 1 and "-base-" in next(iter(seen["a"])), seen
    assert len(seen["b"]) == 1 and "-fix-" in next(iter(seen["b"])), seen
    assert ours(docker_hosts.a) == [] and ours(docker_hosts.b) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_run_leaves_no_container(
    docker_hosts: DockerHosts, engine_images: Images, tmp_path: Path, sig: signal.Signals
) -> None:
    kit = write_kit(tmp_path / "kit.toml", docker_hosts)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stallkit",
            "run",
            "--kit",
            str(kit),
            "--engine",
            engine_images.base,
            "--agents",
            "4",
            "--no-dashboard",
            "--out",
            str(out),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    timeline = out / "timeline.jsonl"

    def requests_running() -> bool:
        assert proc.poll() is None, proc.communicate()[0][-2000:]
        text = timeline.read_text() if timeline.exists() else ""
        # whole lines only: the writer may be mid-line
        return any(
            '"running":' in line and '"running":0,' not in line for line in text.split("\n")[:-1]
        )

    try:
        wait_for(requests_running, 90, "requests running in the container")
        assert len(ours(docker_hosts.a)) == 1
        os.kill(proc.pid, sig)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # SIGTERM first: the run then removes its container
            proc.terminate()
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 130, output[-2000:]
    assert "interrupted" in output
    assert ours(docker_hosts.a) == []
    assert json.loads((out / "meta.json").read_text())["end_reason"] == "interrupted"


def test_engine_that_fails_at_start_is_one_line_and_leaves_no_container(
    docker_hosts: DockerHosts, engine_images: Images, tmp_path: Path
) -> None:
    env = {"MAX_NUM_SEQS": "0"}
    kit = write_kit(tmp_path / "kit.toml", docker_hosts, env=env)
    done = _kit(
        "run", "--kit", str(kit), "--engine", engine_images.base, "--no-dashboard",
        "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "MAX_NUM_SEQS=0 must be at least 1" in done.stderr
    assert ours(docker_hosts.a) == []
