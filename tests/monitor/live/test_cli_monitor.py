"""`kit monitor` through typer's runner: start errors, the watchdog exit code, the timeline."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from stallkit.engine.launch.base import free_port
from stallkit.kits.cli import app
from tests.support import kit, one_error_line

pytestmark = pytest.mark.wallclock

SimServer = Callable[..., AbstractAsyncContextManager[str]]


@pytest.fixture
def frozen_sim(sim_server: SimServer) -> Iterator[str]:
    """A simulator in its own thread and loop, with two requests in flight, frozen at 0.5 s."""
    ready: list[str] = []
    started, stop = threading.Event(), threading.Event()

    async def main() -> None:
        async with sim_server(time_scale=20.0, freeze_at_s=10.0) as url:
            body = {"model": "stallkit-sim", "prompt": "go " * 100, "max_tokens": 50_000,
                    "stream": True}  # fmt: skip

            async def request(client: httpx.AsyncClient) -> None:
                async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
                    async for _ in r.aiter_lines():
                        pass

            async with httpx.AsyncClient(timeout=60) as client:
                tasks = [asyncio.create_task(request(client)) for _ in range(2)]
                ready.append(url)
                started.set()
                while not stop.is_set():
                    await asyncio.sleep(0.05)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(30), "simulator did not start"
    try:
        yield ready[0]
    finally:
        stop.set()
        thread.join(30)


def test_unreachable_url_is_one_line_and_exit_2(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(app, ["monitor", url, "--out", str(tmp_path), "--no-dashboard"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "cannot read engine metrics" in lines[0]
    assert "Traceback" not in result.output


def test_a_monitor_that_cannot_start_leaves_no_run_directory(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    fresh = tmp_path / "new-run"
    result = CliRunner().invoke(app, ["monitor", url, "--out", str(fresh), "--no-dashboard"])
    assert result.exit_code == 2, result.output
    assert not fresh.exists()
    # a directory that was already there is the user's: kept, with what it holds
    kept = tmp_path / "old-run"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine\n")
    result = CliRunner().invoke(app, ["monitor", url, "--out", str(kept), "--no-dashboard"])
    assert result.exit_code == 2, result.output
    assert (kept / "notes.txt").read_text() == "mine\n"


def test_a_monitor_that_cannot_start_leaves_no_default_runs_folder(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    line = one_error_line(kit("monitor", url, "--no-dashboard", cwd=tmp_path))
    assert "cannot read engine metrics" in line
    assert list(tmp_path.iterdir()) == []  # no kit-runs/ made for nothing
    # another run's folder beside it keeps the shared kit-runs/
    (tmp_path / "kit-runs" / "earlier-run").mkdir(parents=True)
    one_error_line(kit("monitor", url, "--no-dashboard", cwd=tmp_path))
    assert [p.name for p in (tmp_path / "kit-runs").iterdir()] == ["earlier-run"]


@pytest.mark.parametrize(
    "args",
    [
        ["--stall-after", "60", "--stop-after", "30"],
        ["--stall-after", "0"],
        ["--gpu-source", "cuda:0"],
    ],
)
def test_bad_settings_are_one_line_and_exit_2(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["monitor", "http://127.0.0.1:1", *args])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_exit_on_stall_against_a_frozen_simulator(frozen_sim: str, tmp_path: Path) -> None:
    args = ["monitor", frozen_sim, "--interval", "0.1", "--stall-after", "1", "--stop-after",
            "0", "--gpu-source", f"dcgm:{frozen_sim}/dcgm/metrics", "--duration", "20",
            "--out", str(tmp_path), "--no-dashboard", "--exit-on-stall"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3, result.output
    assert "STALL started: frozen" in result.output
    lines = [json.loads(x) for x in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    assert {"sample", "gpu", "stall_started"} <= {x["type"] for x in lines}
    assert lines[-1]["type"] == "stall_started" and lines[-1]["gpu_checked"] is True


def test_help_lists_the_flags() -> None:
    result = CliRunner().invoke(app, ["monitor", "--help"])
    assert result.exit_code == 0
    for flag in ("--gpu-source", "--stall-after", "--stop-after", "--exit-on-stall", "--duration"):
        assert flag in result.output
