"""The docker launcher's edges through a fake `docker` CLI: docker's own reason when `docker
run` fails, a stop() that ends an image pull instead of waiting for it, and the plan's check
of each arm's docker host (a GPU runtime for its GPUs, a bridge for its published port)
before anything starts. The same checks against a real daemon are in tests/docker.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from stallkit.engine.errors import EngineError
from stallkit.engine.launch.docker import DockerLauncher, DockerOptions
from stallkit.engine.spec import parse_spec
from stallkit.kits.ab.execute import Plan
from stallkit.kits.errors import KitError
from tests.machine import scaled
from tests.support import alive, kit, one_error_line

IMAGES = {"base": "registry/fork:base", "fix": "registry/fork:fix"}
GPU_BOX = "ssh://me@gpu-box"


def _calls(state: Path) -> list[list[str]]:
    return [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines()]


def _daemons(monkeypatch: pytest.MonkeyPatch, daemons: dict[str, dict[str, object]]) -> None:
    monkeypatch.setenv("FAKE_DOCKER_DAEMONS", json.dumps(daemons))


def test_a_failed_docker_run_shows_dockers_reason(fake_docker: Path, tmp_path: Path) -> None:
    launcher = DockerLauncher(
        parse_spec("registry/fork:nogpu"), DockerOptions(gpus=(0,)), tmp_path / "e.log"
    )
    with pytest.raises(EngineError) as caught:
        launcher.start()
    launcher.stop()
    assert caught.value.message == (
        'docker run failed: Error response from daemon: could not select device driver "" '
        "with capabilities: [[gpu]]."
    )
    assert ["rm", "--force", launcher.name] in _calls(fake_docker)


@pytest.mark.wallclock
def test_stop_ends_an_image_pull_instead_of_waiting_for_it(
    fake_docker: Path, tmp_path: Path
) -> None:
    launcher = DockerLauncher(
        parse_spec("registry/fork:slowpull"), DockerOptions(), tmp_path / "e.log"
    )
    failed: list[BaseException] = []

    def start() -> None:
        try:
            launcher.start()
        except BaseException as exc:  # what the arm's thread would see
            failed.append(exc)

    worker = threading.Thread(target=start)
    worker.start()
    pull_pid = fake_docker / "pull.pid"  # written by the fake once its pull is under way
    deadline = time.monotonic() + 30
    while not pull_pid.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pull_pid.exists(), "the pull did not start"
    began = time.monotonic()
    launcher.stop()
    stop_s = time.monotonic() - began
    worker.join(timeout=30)
    assert not worker.is_alive()
    # the pull sleeps 60 s: stop() ended it. Well under a second on the idle reference
    # machine; 20 s stretched by this machine's speed and load, kept under the pull's 60 s
    assert stop_s < min(scaled(20), 50), stop_s
    assert len(failed) == 1 and isinstance(failed[0], EngineError)
    assert "stopped while its image was pulled" in failed[0].message
    assert not alive(int(pull_pid.read_text()))
    assert not any(call[0] == "run" for call in _calls(fake_docker))  # nothing left to remove
    launcher.stop()  # idempotent
    with pytest.raises(EngineError, match="stopped before it started"):
        launcher.start()


def test_gpus_on_a_docker_without_gpu_runtime_are_refused_before_any_arm_starts(
    fake_docker: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _daemons(monkeypatch, {"": {"runtimes": ["io.containerd.runc.v2", "runc"]}})
    out = tmp_path / "ab"
    # the shipped kit asks for GPUs 0 and 1
    line = one_error_line(
        kit("ab", "--base", IMAGES["base"], "--fix", IMAGES["fix"], "--out", str(out))
    )
    assert "the local docker has no GPU runtime" in line
    assert "base GPUs [0, 1], fix GPUs [0, 1]" in line and "engine.gpus = []" in line
    assert not out.exists()
    assert not any(call[0] in ("run", "pull", "image") for call in _calls(fake_docker))
    # the same kit without GPUs passes
    Plan.build("restore-stall", IMAGES, tmp_path / "cpu", {"engine.gpus": []}, [])


def test_each_arm_is_checked_on_its_own_docker_host(
    fake_docker: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _daemons(monkeypatch, {"": {"runtimes": ["runc"]}})  # the GPU box has the nvidia runtime
    fix_on_box = {"engine.arm_hosts": {"fix": {"docker_host": GPU_BOX}}}
    # base runs on this CPU host without GPUs, fix on the GPU box with the kit's
    Plan.build(
        "restore-stall", IMAGES, tmp_path / "a", {**fix_on_box, "engine.arm_gpus": {"base": []}}, []
    )
    calls = _calls(fake_docker)
    assert ["--host", GPU_BOX, "info", "--format", "{{json .}}"] in calls
    assert ["info", "--format", "{{json .}}"] not in calls  # base asks the local docker for no GPU
    with pytest.raises(KitError) as caught:
        Plan.build("restore-stall", IMAGES, tmp_path / "b", fix_on_box, [])
    assert caught.value.message.startswith("the local docker has no GPU runtime")
    assert "base GPUs [0, 1]" in caught.value.message and "fix" not in caught.value.message
    # with arms on two hosts, the kit-wide list is not the one to clear
    assert "engine.arm_gpus.base = []" in caught.value.hint
    _daemons(monkeypatch, {GPU_BOX: {"runtimes": ["runc"]}})
    with pytest.raises(KitError, match=f"docker on {GPU_BOX} has no GPU runtime"):
        Plan.build("restore-stall", IMAGES, tmp_path / "c", fix_on_box, [])


def test_a_published_port_on_a_docker_without_bridge_is_refused(
    fake_docker: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _daemons(monkeypatch, {"": {"networks": ["host", "none"]}})  # dockerd --bridge=none
    with pytest.raises(KitError) as caught:
        Plan.build("restore-stall", IMAGES, tmp_path / "a", {}, [])
    assert caught.value.message == (
        "the local docker has no bridge network, which the kit's published port needs"
    )
    assert 'engine.network = "host"' in caught.value.hint
    Plan.build("restore-stall", IMAGES, tmp_path / "b", {"engine.network": "host"}, [])


def test_a_docker_that_cannot_run_images_is_refused_before_any_arm_starts(
    fake_docker: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the daemon does not answer: docker's words, before the sim:fix arm runs, dry run or not
    _daemons(monkeypatch, {"": {"down": True}})
    out = tmp_path / "ab"
    for dry_run in ([], ["--dry-run"]):
        line = one_error_line(kit("ab", "--base", IMAGES["base"], "--out", str(out), *dry_run))
        assert "base arm: no docker daemon reachable on this machine (Cannot connect" in line
        assert "sudo systemctl start docker" in line and not out.exists()
    # no docker CLI at all
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(KitError, match=r"docker is not installed \(no `docker` command\)"):
        Plan.build("restore-stall", IMAGES, tmp_path / "a", {}, [])
    assert not (tmp_path / "a").exists()


def test_a_local_image_name_with_no_daemon_names_the_daemon_first(
    fake_docker: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # `myfork:fix`, an image built here, reads as a typo only when a daemon says it has none
    _daemons(monkeypatch, {"": {"down": True}})
    out = tmp_path / "ab"
    line = one_error_line(
        kit("ab", "--base", "myfork:base", "--fix", "myfork:fix", "--out", str(out))
    )
    message, _, hint = line.partition(" (hint: ")
    assert message.startswith("error: no docker daemon reachable on this machine (Cannot connect")
    assert "'myfork:base' as a local docker image" in message
    assert "unknown engine spec form" not in line and not out.exists()
    assert "sudo systemctl start docker" in hint and "DOCKER_HOST" in hint
    assert len(hint) < 140, hint  # short: not the list of every engine form
    assert ["pull", "myfork:base"] not in _calls(fake_docker)
    # a DOCKER_HOST that points nowhere is named as the place that did not answer
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    line = one_error_line(kit("ab", "--base", "registry/fork:base", "--out", str(out)))
    assert "no docker daemon reachable at DOCKER_HOST=tcp://127.0.0.1:9" in line
