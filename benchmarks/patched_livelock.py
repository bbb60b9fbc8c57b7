"""How reliably `patched:base` livelocks on CPU vLLM, and what a spinning core looks like.

For each seed: start the patched engine (policy from --policy) with the cpu-patched kit,
drive the kit's agents, and wait up to --window seconds for the livelock (no generated
token for 3 s with requests running). Once it spins, measure for 5 s the empty scheduler
steps per second, the CPU of the engine-core process and of the whole server tree; then
SIGSTOP the engine core and measure the same CPU for 5 s (frozen). Prints one line per try
and a summary:

    STALLKIT_TINY_MODEL=DIR python benchmarks/patched_livelock.py --tries 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from stallkit.contract import names
from stallkit.engine.launch.patched import PatchedLauncher
from stallkit.engine.spec import parse_spec
from stallkit.kits.arm.launchers import load_config, make_launcher
from stallkit.kits.kit import load_kit
from stallkit.loadgen.agents import run_agents
from stallkit.loadgen.preflight import preflight
from stallkit.monitor.signals.parse import parse_metrics


def _empty_steps(text: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(names.SCHEDULER_STEPS + "{") and 'empty="true"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


async def _measure(
    launcher: PatchedLauncher, client: httpx.AsyncClient, span_s: float
) -> dict[str, float]:
    core = launcher.engine_core_pids()
    tree = launcher.tree_pids()
    before = (_empty_steps((await client.get("/metrics")).text), _cpu(core), _cpu(tree))
    await asyncio.sleep(span_s)
    after = (_empty_steps((await client.get("/metrics")).text), _cpu(core), _cpu(tree))
    return {
        "empty_steps_per_s": (after[0] - before[0]) / span_s,
        "core_cpu": (after[1] - before[1]) / span_s,
        "tree_cpu": (after[2] - before[2]) / span_s,
    }


async def _wait_stall(client: httpx.AsyncClient, window_s: float) -> float | None:
    """Seconds into the load when tokens stopped with requests running, None if they never did."""
    start = time.monotonic()
    last_gen, last_change = -1.0, start
    while time.monotonic() - start < window_s:
        snap = parse_metrics((await client.get("/metrics")).text)
        now = time.monotonic()
        if snap.gen_tokens != last_gen:
            last_gen, last_change = snap.gen_tokens or 0.0, now
        elif (snap.running or 0) > 0 and now - last_change >= 3.0:
            return last_change - start
        await asyncio.sleep(0.5)
    return None


async def _try(policy: str, seed: int, window_s: float, work: Path) -> str:
    kit = load_kit("cpu-patched", {"load.seed": seed, "load.duration_s": window_s + 30})
    launcher = make_launcher("arm", parse_spec(f"patched:{policy}"), kit, work)
    assert isinstance(launcher, PatchedLauncher)
    launcher.start()
    try:
        await asyncio.to_thread(launcher.wait_healthy, kit.engine.startup_timeout_s)
        load = load_config(kit, 1.0)
        info = await preflight(launcher.url, load)
        agents = asyncio.create_task(_drain(run_agents(info, load, work)))
        async with httpx.AsyncClient(base_url=launcher.url, timeout=10) as client:
            onset = await _wait_stall(client, window_s)
            if onset is None:
                agents.cancel()
                return f"seed {seed}: no livelock in {window_s:.0f} s"
            spin = await _measure(launcher, client, 5.0)
            for pid in launcher.engine_core_pids():
                os.kill(pid, signal.SIGSTOP)
            frozen = await _measure(launcher, client, 5.0)
            for pid in launcher.engine_core_pids():
                os.kill(pid, signal.SIGCONT)
        agents.cancel()
        return (
            f"seed {seed}: livelock {onset:.1f} s into the load; spinning: "
            f"{spin['empty_steps_per_s']:.0f} empty steps/s, engine core {spin['core_cpu']:.2f} "
            f"cores, server tree {spin['tree_cpu']:.2f}; SIGSTOPped: engine core "
            f"{frozen['core_cpu']:.2f}, tree {frozen['tree_cpu']:.2f}, "
            f"{frozen['empty_steps_per_s']:.0f} empty steps/s"
        )
    finally:
        await asyncio.to_thread(launcher.stop)


async def _drain(events: object) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        async for _ in events:  # type: ignore[attr-defined]
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--policy", default="base", choices=["base", "fix"])
    parser.add_argument("--window", type=float, default=45.0, help="seconds of load per try")
    args = parser.parse_args()
    lines = []
    with tempfile.TemporaryDirectory(prefix="stallkit-bench-") as tmp:
        for seed in range(1, args.tries + 1):
            line = asyncio.run(_try(args.policy, seed, args.window, Path(tmp) / f"try{seed}"))
            print(line, flush=True)
            lines.append(line)
    stalled = sum(": livelock " in line for line in lines)
    print(f"patched:{args.policy}: livelocked in {stalled} of {len(lines)} tries")


if __name__ == "__main__":
    main()
