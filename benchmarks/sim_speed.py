"""How fast the simulator runs: engine seconds simulated per wall second.

(a) The pure core alone, driven by the sustained twelve-agent workload of
    `engine.sim.workload` on the restore-stall sizes (`SimConfig` defaults). Goal >= 1000x.
(b) The HTTP front (`python -m engine.sim` in its own process) under twelve real streaming
    clients on loopback (httpx, SSE, include_usage): multi-turn conversations growing from
    ~40K to ~100K words, replies of a few hundred tokens, a pause between turns. The server
    paces itself to `--time-scale`; the figure is the engine time it actually covered per
    wall second (its `stallkit_sim_engine_time_seconds` gauge). Goal >= 30x.

    python benchmarks/sim_speed.py [--policy fix] [--core-engine-s 1800] [--http-wall-s 30]
                                   [--time-scale 30 --time-scale 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from engine.sim.config import SimConfig
from engine.sim.metrics import ENGINE_TIME_FAMILY
from engine.sim.workload import WorkloadShape, run_sustained

SHAPE = WorkloadShape()
WORD_POOL = tuple(f"w{i}" for i in range(200_000))
_GAUGE_RE = re.compile(rf"^{ENGINE_TIME_FAMILY}(?:{{[^}}]*}})? (\S+)$", re.M)


def bench_core(policy: str, engine_s: float, seed: int) -> None:
    config = SimConfig.model_validate({"policy": policy})
    start = time.perf_counter()
    result = run_sustained(config, seed, engine_s)
    wall = time.perf_counter() - start
    print(
        f"(a) core alone  policy={policy} seed={seed} sizes: max_num_seqs={config.max_num_seqs} "
        f"num_blocks={config.num_blocks} block_size={config.block_size} "
        f"agents={SHAPE.conversations}\n"
        f"    {result.engine_s:.0f} engine s in {wall:.2f} wall s = "
        f"{result.engine_s / wall:,.0f} engine s per wall s  (steps {result.steps}, "
        f"empty {result.empty_steps}, turns {result.turns_done}, stalls {len(result.stalls)})"
    )


@dataclass
class ClientStats:
    turns: int = 0
    timeouts: int = 0
    errors: int = 0
    chunks: int = 0
    tokens: int = 0
    prompt_words: list[int] = field(default_factory=list)


class Conversation:
    """One agent: a growing chat whose every turn re-sends the whole history."""

    def __init__(self, index: int, rng: random.Random) -> None:
        self.index = index
        self.rng = rng
        self.session = 0
        self.messages: list[dict[str, str]] = []
        self.words = 0
        self.new_session(SHAPE.first_session_tokens)

    def _content(self, count: int) -> str:
        start = self.rng.randrange(0, len(WORD_POOL) - count)
        return " ".join(WORD_POOL[start : start + count])

    def new_session(self, size: tuple[int, int]) -> None:
        self.session += 1
        count = self.rng.randint(*size)
        header = f"agent{self.index} session{self.session}"
        self.messages = [
            {"role": "system", "content": header},
            {"role": "user", "content": self._content(count)},
        ]
        self.words = count

    def grow(self, reply: str, replied: int) -> None:
        new = self.rng.randint(*SHAPE.new_tokens)
        if self.words + replied + new > SHAPE.restart_above_tokens:
            self.new_session(SHAPE.start_tokens)
            return
        self.messages.append({"role": "assistant", "content": reply})
        self.messages.append({"role": "user", "content": self._content(new)})
        self.words += replied + new


async def one_turn(
    client: httpx.AsyncClient,
    conv: Conversation,
    max_tokens: int,
    read_timeout_s: float,
    stats: ClientStats,
) -> None:
    body = json.dumps(
        {
            "model": "stallkit-sim",
            "messages": conv.messages,
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
    ).encode()
    parts: list[str] = []
    timeout = httpx.Timeout(30.0, read=read_timeout_s)
    try:
        headers = {"content-type": "application/json"}
        async with client.stream(
            "POST", "/v1/chat/completions", content=body, headers=headers, timeout=timeout
        ) as resp:
            if resp.status_code != 200:
                await resp.aread()
                stats.errors += 1
                return
            async for line in resp.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk["choices"]:
                    text = chunk["choices"][0]["delta"].get("content")
                    if text:
                        parts.append(text)
                        stats.chunks += 1
    except httpx.ReadTimeout:
        stats.timeouts += 1
        return
    except httpx.HTTPError:
        stats.errors += 1
        return
    reply = "".join(parts)
    replied = len(reply.split())
    stats.turns += 1
    stats.tokens += replied
    stats.prompt_words.append(conv.words)
    conv.grow(reply, replied)


async def agent(
    url: str, conv: Conversation, scale: float, deadline: float, stats: ClientStats
) -> None:
    rng = conv.rng
    await asyncio.sleep(rng.uniform(0, SHAPE.first_start_s) / scale)
    read_timeout = (SHAPE.read_timeout_s or 600.0) / scale
    async with httpx.AsyncClient(base_url=url) as client:
        while time.monotonic() < deadline:
            await one_turn(client, conv, rng.randint(*SHAPE.reply_tokens), read_timeout, stats)
            await asyncio.sleep(rng.uniform(*SHAPE.think_s) / scale)


async def engine_time(client: httpx.AsyncClient) -> float:
    text = (await client.get("/metrics")).text
    match = _GAUGE_RE.search(text)
    if match is None:
        raise SystemExit(f"{ENGINE_TIME_FAMILY} missing from /metrics")
    return float(match.group(1))


def start_server(policy: str, scale: float, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    argv = [sys.executable, "-m", "engine.sim", "--policy", policy, "--port", "0",
            "--time-scale", str(scale), "--log-level", "warning"]  # fmt: skip
    out = log.open("wb")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=out)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"server did not start: {log.read_text()}")
    return proc, line.split()[-1]


async def bench_http_async(
    url: str, proc: psutil.Process, scale: float, wall_s: float, seed: int
) -> None:
    stats = ClientStats()
    rng = random.Random(seed)
    convs = [Conversation(i, random.Random(rng.random())) for i in range(SHAPE.conversations)]
    async with httpx.AsyncClient(base_url=url) as probe:
        t0, e0 = time.monotonic(), await engine_time(probe)
        proc.cpu_percent()
        deadline = t0 + wall_s
        tasks = [asyncio.create_task(agent(url, c, scale, deadline, stats)) for c in convs]
        await asyncio.sleep(wall_s)
        t1, e1 = time.monotonic(), await engine_time(probe)
        cpu = proc.cpu_percent()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    rate = (e1 - e0) / (t1 - t0)
    sizes = stats.prompt_words
    print(
        f"    time_scale={scale:g}: {e1 - e0:.0f} engine s in {t1 - t0:.1f} wall s = "
        f"{rate:.1f} engine s per wall s  (server CPU {cpu:.0f}%, turns {stats.turns}, "
        f"timeouts {stats.timeouts}, errors {stats.errors}, tokens {stats.tokens}, "
        f"chunks {stats.chunks}, prompts {min(sizes, default=0)}-{max(sizes, default=0)} words)"
    )


def bench_http(policy: str, scale: float, wall_s: float, seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        proc, url = start_server(policy, scale, log)
        try:
            asyncio.run(bench_http_async(url, psutil.Process(proc.pid), scale, wall_s, seed))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        warnings = [line for line in log.read_text().splitlines() if "behind" in line]
        if warnings:
            print("    server: " + warnings[0])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", choices=["base", "fix"], default="fix")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--core-engine-s", type=float, default=1800.0, help="engine seconds for (a)"
    )
    parser.add_argument("--http-wall-s", type=float, default=30.0, help="wall seconds per (b) run")
    parser.add_argument("--time-scale", type=float, action="append", help="(b) scales (repeatable)")
    parser.add_argument("--skip-core", action="store_true")
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()
    if not args.skip_core:
        bench_core(args.policy, args.core_engine_s, args.seed)
    if not args.skip_http:
        config = SimConfig()
        print(
            f"(b) HTTP front  policy={args.policy} seed={args.seed} "
            f"{SHAPE.conversations} streaming clients, prompts "
            f"{SHAPE.start_tokens[0]}-{SHAPE.restart_above_tokens} words, sizes: "
            f"max_num_seqs={config.max_num_seqs} num_blocks={config.num_blocks} "
            f"block_size={config.block_size}"
        )
        for scale in args.time_scale or [30.0, 300.0]:
            bench_http(args.policy, scale, args.http_wall_s, args.seed)


if __name__ == "__main__":
    main()
