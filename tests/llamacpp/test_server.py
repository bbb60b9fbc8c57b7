"""llama.cpp's real server on CPU serving the tiny GGUF model: the launcher starts it on port 0
and stops it leaving no process, `kit load` and `kit run` run turns against it, the monitor
reads healthy load as no stall (and a SIGSTOPped server as frozen: see below), and the metric families of
tests/data/llamacpp-metrics.txt are the ones the server serves.

Marked `nightly`: the server is built from the llama-cpp-python sdist (`kit engine llamacpp
build`), which takes far more CPU than CI's budget allows (see the README); the nightly job
builds it. Without a build (or `$STALLKIT_LLAMA_SERVER`) every test here skips with that
reason. The monitor reads llama.cpp's page through its `llamacpp` metric dialect. A
SIGSTOPped server answers no scrape; with clients waiting on it, it reads as frozen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from stallkit.engine import LlamacppLauncher, LlamacppSpec, parse_spec
from stallkit.engine.launch.llamacpp.build import find_server
from stallkit.engine.launch.llamacpp.model import write_tiny_gguf
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import Down, MonitorEvent, Sample, StallStarted, Verdict
from stallkit.monitor.live.watch import watch
from stallkit.monitor.signals.gpu import gpu_source
from tests.serving import chat_load
from tests.support import REPO, alive, kit

_SERVER = find_server()
pytestmark = [
    pytest.mark.wallclock,
    pytest.mark.nightly,
    pytest.mark.skipif(
        _SERVER is None or not _SERVER.is_file(),
        reason="llama.cpp's server is not built here: kit engine llamacpp build",
    ),
]
PAGE = REPO / "tests" / "data" / "llamacpp-metrics.txt"
SLOTS, CTX_PER_SLOT = 2, 4096
INTERVAL_S, STALL_AFTER_S = 0.25, 2.0


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@contextlib.contextmanager
def served(model: Path, work: Path) -> Iterator[LlamacppLauncher]:
    spec = parse_spec(f"llamacpp:{model}")
    assert isinstance(spec, LlamacppSpec)
    launcher = LlamacppLauncher(spec, work, slots=SLOTS, ctx_per_slot=CTX_PER_SLOT, threads=2)
    launcher.start()
    try:
        launcher.wait_healthy(120)
        yield launcher
    finally:
        launcher.stop()


@contextlib.asynccontextmanager
async def load(url: str, n: int, max_tokens: int) -> AsyncIterator[list[asyncio.Task[int]]]:
    """`n` concurrent streaming chats to the tiny model, to its last token (no EOS stop)."""
    async with chat_load(url, n, max_tokens, model="tiny", ignore_eos=True, timeout_s=60) as t:
        yield t


async def collect(
    launcher: LlamacppLauncher,
    duration_s: float,
    until: type | None = None,
    client_pending: Callable[[], int] | None = None,
) -> list[MonitorEvent]:
    config = MonitorConfig(
        interval_s=INTERVAL_S, stall_after_s=STALL_AFTER_S, stop_after_s=None, scrape_timeout_s=2
    )
    events: list[MonitorEvent] = []
    async for event in watch(launcher.url, config, gpu_source("none"), duration_s=duration_s,
                             engine_cpu=launcher.cpu_seconds,
                             client_pending=client_pending):  # fmt: skip
        events.append(event)
        if until is not None and isinstance(event, until):
            break
    return events


def _families(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def test_the_launcher_serves_on_a_port_of_its_own_and_stops_leaving_nothing(
    model: Path, tmp_path: Path
) -> None:
    with served(model, tmp_path) as launcher:
        pids = launcher.pids()
        assert launcher.url.startswith("http://127.0.0.1:") and not launcher.url.endswith(":0")
        models = httpx.get(f"{launcher.url}/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["tiny"]
        page = httpx.get(f"{launcher.url}/metrics", timeout=10).text
        assert "llamacpp:requests_processing" in page
        assert (launcher.cpu_seconds() or 0) > 0
    assert pids and not any(alive(pid) for pid in pids)
    assert launcher.pids() == [] and launcher.cpu_seconds() is None
    launcher.stop()  # idempotent
    assert launcher.log_path is not None and "listening on" in launcher.log_path.read_text()


async def test_the_saved_page_has_the_families_the_server_serves(
    model: Path, tmp_path: Path
) -> None:
    with served(model, tmp_path) as launcher:
        async with load(launcher.url, SLOTS, max_tokens=400):
            await asyncio.sleep(2.0)
            async with httpx.AsyncClient() as client:
                live = (await client.get(f"{launcher.url}/metrics", timeout=10)).text
    assert _families(live) == _families(PAGE.read_text(encoding="utf-8"))


def test_kit_load_runs_turns_against_it(model: Path, tmp_path: Path) -> None:
    with served(model, tmp_path / "engine") as launcher:
        done = kit("load", launcher.url, "--agents", "2", "--min-context", "600",
                   "--max-context", "2000", "--max-turns", "2", "--duration", "60",
                   "--out", str(tmp_path / "run"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["turns_ok"] == summary["requests"] == 4, summary["outcomes"]
    # the prompts counted through /apply-template are the sizes the server reports
    assert summary["prompt_size_mismatches"] == 0
    assert summary["generated_tokens"] > 0


KIT = """\
name = "llamacpp-smoke"
description = "two agents against llama.cpp's server on CPU"

[engine]
startup_timeout_s = 120

[load]
agents = 2
min_context = 600
max_context = 2000
system_prompt_tokens = 100
new_tokens_min = 50
new_tokens_max = 200
reply_tokens_min = 50
reply_tokens_max = 200
think_min_s = 0.2
think_max_s = 0.5
duration_s = 15
seed = 1

[monitor]
interval_s = 0.5
stall_after_s = 5
gpu_source = "none"
"""


def test_kit_run_against_it_reads_no_stall(model: Path, tmp_path: Path) -> None:
    (tmp_path / "kit.toml").write_text(KIT)
    done = kit("run", "--engine", f"llamacpp:{model}", "--kit", str(tmp_path / "kit.toml"),
               "--out", str(tmp_path / "run"), "--no-dashboard", timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    meta = json.loads(next((tmp_path / "run").rglob("meta.json")).read_text())
    assert meta["kind"] == "llamacpp" and meta["end_reason"] == "duration"
    timeline = next((tmp_path / "run").rglob("timeline.jsonl")).read_text()
    assert '"stall_started"' not in timeline


async def test_healthy_load_is_not_flagged(model: Path, tmp_path: Path) -> None:
    with served(model, tmp_path) as launcher:
        async with load(launcher.url, SLOTS, max_tokens=2000):
            events = await collect(launcher, duration_s=4 * STALL_AFTER_S)
    assert not any(isinstance(e, StallStarted) for e in events)
    samples = [e for e in events if isinstance(e, Sample)]
    assert max(s.snapshot.running or 0 for s in samples) == SLOTS
    # idle only before the first request reaches a slot
    assert {e.state.status for e in events if isinstance(e, Verdict)} <= {"ok", "suspect", "idle"}


async def test_a_sigstopped_server_is_read_as_frozen(model: Path, tmp_path: Path) -> None:
    """A SIGSTOP stops llama-server's HTTP threads too, so its page never answers (the kernel
    accepts the connection): with the run's clients waiting on their streams that is a frozen
    engine, not one that went down."""
    with served(model, tmp_path) as launcher:
        async with load(launcher.url, SLOTS, max_tokens=20_000) as streams:

            def waiting() -> int:
                return sum(not task.done() for task in streams)

            watching = asyncio.create_task(
                collect(launcher, duration_s=8 * STALL_AFTER_S, until=StallStarted,
                        client_pending=waiting)
            )  # fmt: skip
            await asyncio.sleep(1.5)  # the monitor has seen tokens flow
            pid = launcher.pids()[0]
            os.kill(pid, signal.SIGSTOP)
            try:
                events = await watching
            finally:
                os.kill(pid, signal.SIGCONT)
    samples = [e for e in events if isinstance(e, Sample)]
    assert max(s.snapshot.running or 0 for s in samples) == SLOTS  # busy before the stop
    downs = [e for e in events if isinstance(e, Down)]
    assert all("timed out" in e.error for e in downs)  # accepted, never answered: not refused
    started = [e for e in events if isinstance(e, StallStarted)]
    assert [e.kind for e in started] == ["frozen"], [type(e).__name__ for e in events]
    evidence = started[0].evidence
    assert evidence is not None and evidence.page_unanswered
    assert evidence.client_waiting == SLOTS
