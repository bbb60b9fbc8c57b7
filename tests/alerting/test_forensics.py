"""Forensics bundles: the stack dump of the simulator's core spinning in the base livelock
names the scheduler's step function; a frozen simulator arm's bundle holds its /metrics
page, log tail, detector inputs and scheduler state; the docker commands; the folded-stack
reader."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from stallkit.contract.timeline import SampleLine
from stallkit.engine.launch.sim import SimLauncher
from stallkit.engine.spec import parse_spec
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import StallStarted
from stallkit.monitor.live.watch import watch
from stallkit.monitor.on_stall.forensics import (
    PTRACE_HINT,
    EngineTarget,
    ForensicsCollector,
    docker_commands,
    hot_leaves,
    hottest_frames,
)
from stallkit.monitor.signals.gpu import gpu_source
from stallkit.monitor.signals.parse import MetricsSnapshot
from tests.alerting.alerting_support import streaming_load

REPO = Path(__file__).parents[2]

SPIN = (
    "from stallkit.engine.sim.trace import prepare\n"
    "engine, now = prepare('base', 'full-slots')\n"
    "print('spinning', flush=True)\n"
    "while True:\n"
    "    now += engine.step(now).duration_s\n"
)


def _started(kind: str = "spinning") -> StallStarted:
    return StallStarted(5.0, 4.0, kind, False, MetricsSnapshot())  # type: ignore[arg-type]


@pytest.mark.wallclock
def test_stack_dump_of_the_spinning_base_scheduler_names_its_step(tmp_path: Path) -> None:
    # The simulator's core in the base livelock, stepping forever in its own process.
    proc = subprocess.Popen(
        [sys.executable, "-c", SPIN], cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"spinning\n"
        target = EngineTarget("local", pids=lambda: [proc.pid])
        collector = ForensicsCollector(tmp_path, "http://127.0.0.1:9", target, window_s=1.0)
        out = collector.collect(_started(), [SampleLine(t=4.5)])
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    manifest = json.loads((out / "manifest.json").read_text())
    if PTRACE_HINT in manifest["errors"]:
        pytest.skip(f"no ptrace permission here: {manifest['errors']}")
    assert [e for e in manifest["errors"] if not e.startswith("GET ")] == [], manifest
    # the dump is one instant (it may catch the loop between two steps); the record samples
    # the process for a while, so its hottest frames are where it spins
    dump = (out / "stacks" / f"{proc.pid}-dump.txt").read_text()
    assert f"Process {proc.pid}" in dump and "MainThread" in dump, dump
    top = " | ".join(manifest["top_frames"])
    assert "engine/sim/scheduler.py:" in top and ("step (" in top or "_step (" in top), top
    assert f"stacks/{proc.pid}.folded" in manifest["files"]
    # the step's work is spread over the scheduler and its two passes: any of them may be the
    # hottest leaf of a given recording
    step_modules = (
        "sim/scheduler.py",
        "sim/admission.py",
        "sim/running.py",
        "policy/controller.py",
    )
    leaves = manifest["hot_leaves"][:3]
    assert any(f"engine/{m})" in leaf for leaf in leaves for m in step_modules), leaves


@pytest.mark.wallclock
async def test_bundle_of_a_frozen_sim_arm(tmp_path: Path) -> None:
    scale = 20.0
    launcher = SimLauncher(
        parse_spec("sim:base"), tmp_path, {}, scale, extra_args=["--freeze-at", "60"]
    )
    launcher.start()
    try:
        launcher.wait_healthy(30)
        url = launcher.url
        target = EngineTarget("sim", pids=launcher.pids, log_path=tmp_path / "engine.log")
        collector = ForensicsCollector(tmp_path, url, target, window_s=0.5, record_s=0.2)
        mon = MonitorConfig(interval_s=0.1, stall_after_s=0.5, stop_after_s=None)
        events = []
        async with streaming_load(url, 2, max_tokens=50_000):
            async for event in watch(url, mon, gpu_source("none"), duration_s=10):
                collector.handle(event)
                events.append(event)
                if isinstance(event, StallStarted):
                    break
        await asyncio.to_thread(collector.close)
    finally:
        launcher.stop()
    assert isinstance(events[-1], StallStarted) and events[-1].kind == "frozen"
    (bundle,) = (tmp_path / "forensics").iterdir()
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["kind"] == "frozen"
    for name in ("metrics.txt", "inputs.jsonl", "engine-log-tail.txt", "sim-state.json"):
        assert name in manifest["files"] and (bundle / name).stat().st_size > 0
    assert "vllm:num_requests_running" in (bundle / "metrics.txt").read_text()
    assert "stallkit-sim serving on" in (bundle / "engine-log-tail.txt").read_text()
    inputs = [json.loads(x) for x in (bundle / "inputs.jsonl").read_text().splitlines()]
    assert inputs and {x["type"] for x in inputs} == {"sample"}
    assert inputs[-1]["t"] - inputs[0]["t"] <= 0.5 + 1e-9
    state = json.loads((bundle / "sim-state.json").read_text())
    assert state["frozen"] is True and state["policy"] == "base"
    assert len(state["running"]) == 2 and "vruntime_prefill" in state and "pool" in state
    # the report quotes the state in one line, read from the same page
    assert manifest["scheduler"] == (
        f"scheduler (base): 2 running, {len(state['waiting'])} waiting "
        f"({len(state['waiting'])} capacity, 0 deferred), {state['pool']['free']} of "
        f"{state['pool']['num_blocks']} blocks free, {state['empty_steps']} empty steps so far"
    )
    if PTRACE_HINT not in manifest["errors"]:
        assert any(f.endswith("-dump.txt") for f in manifest["files"]), manifest


def test_hottest_frames_skip_the_waiting_loop_and_follow_the_busiest_leaf() -> None:
    folded = (
        "main (a.py:1);loop (a.py:5) 90\n"  # the event loop waiting: a prefix of the others
        "main (a.py:1);loop (a.py:5);step (s.py:9);_pass (s.py:20) 30\n"
        "main (a.py:1);loop (a.py:5);http (h.py:3);parse (h.py:8) 20\n"
        "main (a.py:1);loop (a.py:5);http (h.py:3);send (h.py:9) 20\n"
        "main (a.py:1);loop (a.py:5);other (o.py:2);_pass (s.py:20) 5\n"
        "garbage line\n"
    )
    assert hottest_frames(folded, limit=3) == ["_pass (s.py:20)", "step (s.py:9)", "loop (a.py:5)"]
    assert hottest_frames("main (a.py:1) 3\n") == ["main (a.py:1)"]
    assert hot_leaves(folded, limit=2) == ["_pass (s.py) 47%", "parse (h.py) 27%"]
    assert hottest_frames("") == []


def test_docker_commands_use_py_spy_in_the_image_or_fall_back_to_top_and_stats() -> None:
    with_spy = docker_commands("arm-1", has_py_spy=True)
    assert with_spy["stacks/container-dump.txt"] == [
        "docker", "exec", "arm-1", "py-spy", "dump", "--pid", "1",
    ]  # fmt: skip
    without = docker_commands("arm-1", has_py_spy=False)
    assert without["stacks/container-ps.txt"][:3] == ["docker", "top", "arm-1"]
    assert without["stacks/container-stats.txt"] == ["docker", "stats", "--no-stream", "arm-1"]
    assert all(isinstance(a, str) for argv in without.values() for a in argv)


def test_a_remote_engine_bundle_keeps_the_page_and_inputs_and_records_failures(
    tmp_path: Path,
) -> None:
    collector = ForensicsCollector(
        tmp_path, "http://127.0.0.1:9", EngineTarget("remote"), window_s=1.0
    )
    out = collector.collect(_started("frozen"), [SampleLine(t=4.5)])
    manifest = json.loads((out / "manifest.json").read_text())
    assert out.name == "0000004000ms"
    assert manifest["files"] == ["inputs.jsonl", "verdict.json"]
    assert (
        len(manifest["errors"]) == 1 and "GET http://127.0.0.1:9/metrics" in manifest["errors"][0]
    )
