"""One arm of a run: launch, wait, watch, drive the agents, stop, write the arm directory.

The monitor and the agents are two async event streams; this module merges them, writes
the timeline, feeds the view, and ends the arm when the load's duration passes or the
monitor requests a stop. Whatever ends it (duration, stall stop, error, Ctrl-C, SIGTERM),
the engine is stopped and meta.json and summary.json are written from what was recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from contract.files import KIT_FILE, META_FILE, SUMMARY_FILE, TIMELINE_FILE, TURNS_FILE
from contract.jsonl import write_json
from contract.kitfile import KitFile
from contract.meta import ArmMeta
from contract.records import read_records
from contract.summary import summarize
from engine import Launcher, tail_lines
from kits.alerting import Alerting, ArmAlerting
from kits.config import Kit
from kits.errors import KitError
from kits.launch import load_config, make_launcher, monitor_config, time_scale
from kits.plan import Arm, Plan
from kits.view import RunView
from loadgen import LoadConfig, RunFinished, run_agents
from loadgen.preflight import ServerInfo, preflight
from monitor import (
    GpuReader,
    MonitorConfig,
    MonitorError,
    SimClock,
    StopRequested,
    TimelineWriter,
    gpu_source,
    parse_metrics,
)
from monitor.watch import watch

#: how often a run asks whether its engine is still alive (wall seconds)
ENGINE_POLL_S = 1.0


class EngineDied(KitError):
    """The engine ended on its own during the run; the message holds its last log lines."""


@dataclass(frozen=True)
class _EngineExited:
    """The engine's process or container ended while the run was under way."""

    reason: str


async def _watch_engine(launcher: Launcher) -> AsyncIterator[_EngineExited]:
    while True:
        reason = await asyncio.to_thread(launcher.exit_reason)
        if reason is not None:
            yield _EngineExited(reason)
            return
        await asyncio.sleep(ENGINE_POLL_S)


def _died_message(launcher: Launcher, reason: str) -> str:
    tail = tail_lines(launcher.log_path)
    msg = f"{launcher.spec.raw} died during the run ({reason})"
    return msg + ("; last log lines:\n" + tail if tail else "")


@dataclass(frozen=True)
class _Done:
    """A stream ended (normally, or with the error it raised)."""

    stream: str
    error: BaseException | None


async def _pump(name: str, events: AsyncIterator[Any], queue: asyncio.Queue[Any]) -> None:
    try:
        async for event in events:
            await queue.put(event)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # handed to the arm, which decides; never lost in a task
        await queue.put(_Done(name, exc))
        return
    await queue.put(_Done(name, None))


async def _sim_clock(url: str, timeout_s: float) -> SimClock | None:
    """The simulator's own clock, as the monitor parses it (None for real engines)."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            text = (await client.get(f"{url}/metrics")).text
        return parse_metrics(text).sim_clock
    except (httpx.HTTPError, MonitorError):
        return None


async def _engine_time_s(url: str) -> float | None:
    """The simulator's engine clock (None for real engines, which run on the wall clock)."""
    # a simulator that fell far behind answers slowly: wait for it rather than guess
    clock = await _sim_clock(url, timeout_s=30.0)
    return None if clock is None else clock.engine_s


async def _arm_scale(arm: Arm, kit: Kit) -> float:
    """The arm's nominal time scale. A `url:` arm takes the one its engine states: 1 for a real
    engine, the simulator's own when it attaches to a `kit sim serve --time-scale N`."""
    if arm.spec.kind != "url":
        return time_scale(arm.spec, kit)
    # asked before the health check, which says what is wrong with an engine that does not
    # answer: a short wait here, so that such an engine is not kept waiting for twice
    stated = await _sim_clock(arm.spec.target.rstrip("/"), timeout_s=2.0)
    return 1.0 if stated is None else stated.scale


async def _drive(
    arm: Arm,
    launcher: Launcher,
    info: ServerInfo,
    load: LoadConfig,
    mon: MonitorConfig,
    gpu: GpuReader,
    view: RunView,
    scale: float,
    hooks: ArmAlerting,
) -> str:
    """Run agents and monitor together until the duration passes or a stall stop; the end reason.

    Raises EngineDied when the engine ends on its own meanwhile.
    """
    url = launcher.url
    queue: asyncio.Queue[Any] = asyncio.Queue()
    tasks = [
        asyncio.create_task(
            _pump("monitor", watch(url, mon, gpu, engine_cpu=launcher.cpu_seconds), queue)
        ),
        asyncio.create_task(_pump("load", run_agents(info, load, arm.dir), queue)),
        asyncio.create_task(_pump("engine", _watch_engine(launcher), queue)),
    ]
    timeline = TimelineWriter(arm.dir / TIMELINE_FILE)
    try:
        while True:
            event = await queue.get()
            if isinstance(event, _Done):
                if event.error is not None:
                    raise event.error
                if event.stream == "load":
                    return "duration"
                continue
            if isinstance(event, _EngineExited):
                raise EngineDied(_died_message(launcher, event.reason))
            if isinstance(event, RunFinished):
                # let the agents' generator finish its clean-up (it closes turns.jsonl and its
                # client); a cancel landing inside that clean-up would leak them
                await asyncio.wait({tasks[1]}, timeout=10.0)
                return "duration"
            if view.handle(event):  # a monitor event
                timeline.write(event)
                hooks.handle(event)
                if isinstance(event, StopRequested):
                    stall_s = event.stall_s * scale
                    view.note(f"{arm.name}: stall for {stall_s:.1f} engine s: stopping the run")
                    return "stall_stop"
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        timeline.close()


def _write_summary(arm_dir: Path, scale: float) -> None:
    records = read_records(arm_dir / TURNS_FILE) if (arm_dir / TURNS_FILE).exists() else []
    write_json(arm_dir / SUMMARY_FILE, summarize(records).model_copy(update={"time_scale": scale}))


async def run_arm(arm: Arm, plan: Plan, console: Console, dashboard: bool) -> None:
    """Run one arm end to end; its directory is complete on every exit path."""
    kit = plan.kit
    scale = await _arm_scale(arm, kit)
    arm.dir.mkdir(parents=True, exist_ok=True)
    write_json(arm.dir / KIT_FILE, KitFile.of(kit.model_dump(mode="json"), scale))
    meta = ArmMeta.starting(
        arm=arm.name,
        spec=arm.spec.raw,
        kind=arm.spec.kind,
        clock="wall",
        seed=kit.load.seed,
        time_scale=scale,
        planned_duration_s=kit.load.duration_s,
        started_at=datetime.now(UTC).isoformat(),
    )
    write_json(arm.dir / META_FILE, meta)
    end: dict[str, Any] = {"end_reason": "starting", "error": None}
    launcher = make_launcher(arm.name, arm.spec, kit, arm.dir, plan.overlays)
    plan.launchers.append(launcher)
    load, mon = load_config(kit, scale), monitor_config(kit, scale)
    view = RunView(console, arm.name, arm.spec.raw, load.duration_s or 0.0, dashboard, scale)
    t_load = time.monotonic()
    engine_t0: float | None = None
    hooks = ArmAlerting()
    try:
        view.note(f"{arm.name}: starting {arm.spec.raw}")
        await asyncio.to_thread(launcher.start)
        await asyncio.to_thread(launcher.wait_healthy, kit.engine.startup_timeout_s)
        source = (
            kit.monitor.gpu_source if kit.monitor.gpu_source.kind != "auto" else launcher.gpu_source
        )
        gpu = gpu_source(source, timeout_s=mon.scrape_timeout_s)
        info = await preflight(launcher.url, load)
        view.note(f"{arm.name}: {launcher.url} healthy, model {info.model}; {load.agents} agents")
        if scale != 1.0:
            view.note(f"{arm.name}: engine runs at {scale:g}x; times and rates shown are engine's")
        engine_t0 = await _engine_time_s(launcher.url)
        alerting = plan.alerting or Alerting()
        hooks = alerting.for_arm(arm.name, arm.spec, arm.dir, launcher, mon.stall_after_s)
        t_load = time.monotonic()
        async with view.live(launcher.url):
            end["end_reason"] = await _drive(
                arm, launcher, info, load, mon, gpu, view, scale, hooks
            )
    except asyncio.CancelledError:
        end["end_reason"] = "interrupted"
        raise
    except EngineDied as exc:
        # a result, not a failure of the run: the other arm still runs and the table says so
        end["end_reason"], end["error"] = "engine_died", str(exc)
        view.note(f"{arm.name}: {str(exc).splitlines()[0]}")
    except BaseException as exc:
        end["end_reason"], end["error"] = (
            "error",
            str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        )
        raise
    finally:
        # the wall time is taken when the engine clock is read, so the two cover the same span
        engine_t1 = await _engine_time_s(launcher.url) if engine_t0 is not None else None
        wall_s = round(time.monotonic() - t_load, 3)
        end["wall_s"] = wall_s
        end["stopped_by_monitor"] = end["end_reason"] == "stall_stop"
        if engine_t0 is not None and engine_t1 is not None:
            end["engine_s"] = engine_s = round(engine_t1 - engine_t0, 3)
            end["engine_s_per_wall_s"] = round(engine_s / max(wall_s, 1e-9), 2)
        await asyncio.to_thread(hooks.close)  # bundles and on-stall commands, before the stop
        with contextlib.suppress(Exception):
            await asyncio.to_thread(launcher.stop)
        end["finished_at"] = datetime.now(UTC).isoformat()
        # meta.json first: the arm's end is recorded even if the summary then fails
        meta = meta.update(**end)
        write_json(arm.dir / META_FILE, meta)
        _write_summary(arm.dir, scale)
        ran = f"{meta.engine_s:.0f} engine s, " if meta.engine_s is not None else ""
        view.note(f"{arm.name}: {meta.end_reason} after {ran}{meta.wall_s:.1f} wall s")
