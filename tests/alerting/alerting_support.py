"""Helpers of the alerting tests: record a timeline against a live simulator, find the
Prometheus tools (or skip saying how to get them)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.sim.config import SimConfig
from engine.sim.serve import ServeOptions, running
from monitor.config import MonitorConfig
from monitor.gpu import gpu_source
from monitor.session import run_monitor

INTERVAL_S = 0.1
STALL_AFTER_S = 1.0
SCALE = 20.0
CONFIG = MonitorConfig(
    interval_s=INTERVAL_S,
    stall_after_s=STALL_AFTER_S,
    stop_after_s=None,
    scrape_timeout_s=2,
    # PromQL judges each GPU reading as it is: so does the detector here, for a like-for-like
    # onset (its default forgives readings within the window after an onset)
    gpu_window_s=0.0,
)


@dataclass(frozen=True)
class Recorded:
    """A timeline recorded against a simulator, with its parsed lines."""

    path: Path
    lines: list[dict[str, Any]]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [x for x in self.lines if x["type"] == kind]


async def _stream(client: httpx.AsyncClient, url: str, max_tokens: int) -> None:
    body = {
        "model": "stallkit-sim",
        "prompt": "tell me about stalls " * 40,
        "max_tokens": max_tokens,
        "stream": True,
    }
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        async for _line in response.aiter_lines():
            pass


@contextlib.asynccontextmanager
async def streaming_load(url: str, n: int, max_tokens: int) -> AsyncIterator[None]:
    """`n` concurrent streaming requests, cancelled when the block ends."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client:
        tasks = [asyncio.create_task(_stream(client, url, max_tokens)) for _ in range(n)]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def record(out: Path, duration_s: float, max_tokens: int, **faults: float) -> Recorded:
    opts = ServeOptions(config=SimConfig(policy="base"), time_scale=SCALE, **faults)
    async with running(opts) as url, streaming_load(url, 2, max_tokens):
        await run_monitor(
            url,
            CONFIG,
            gpu_source(f"dcgm:{url}/dcgm/metrics"),
            out_dir=out,
            duration_s=duration_s,
            display="none",
        )
    path = out / "timeline.jsonl"
    return Recorded(path, [json.loads(x) for x in path.read_text().splitlines()])


def tool(name: str) -> str:
    """The path of a Prometheus tool, or skip the test saying how to get it."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (Debian: apt-get install prometheus)")
    return path
