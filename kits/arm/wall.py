"""The HTTP arm driver: launch, wait, watch, drive the agents over asyncio, stop.

The monitor, the agents and the engine's liveness are async event streams; this module merges
them, hands the monitor's events to the arm recorder (`stallkit.kits.arm.recorder`, whose sinks are the
timeline, forensics, exporter, on-stall and the view) and the agents' to the view, and ends
the arm when the load's duration passes or the monitor requests a stop. Whatever ends it
(duration, stall stop, error, Ctrl-C, SIGTERM), the engine is stopped and the recorder closes
the directory from the typed end. It takes what it runs as a `WallArm` (the arm, its seed's
kit, its overlays) from whichever room runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from stallkit.contract.meta import END_WORDS, EndReason
from stallkit.engine import EngineSpec, Launcher, Overlay, tail_lines
from stallkit.kits.arm.alerting import Alerting
from stallkit.kits.arm.clients import ClientWaits
from stallkit.kits.arm.kinds import kind_of
from stallkit.kits.arm.kinds.attached import sim_clock
from stallkit.kits.arm.launchers import load_config, make_launcher, monitor_config
from stallkit.kits.arm.recorder import ArmEnd, ArmRecorder, error_line
from stallkit.kits.arm.view import RunView
from stallkit.kits.errors import KitError
from stallkit.kits.kit import Kit
from stallkit.loadgen import LoadConfig, RunFinished, run_agents
from stallkit.loadgen.preflight import ServerInfo, preflight
from stallkit.monitor import (
    GpuReader,
    MonitorConfig,
    StopRequested,
    gpu_source,
    resolve_gpu_source,
)
from stallkit.monitor.live.watch import watch

#: how often a run asks whether its engine is still alive (wall seconds)
ENGINE_POLL_S = 1.0


@dataclass(frozen=True)
class WallArm:
    """One wall-clock arm as the driver runs it: its name, its spec (with the capabilities the
    kit gives it), its directory, the kit it runs (its seed's) and, for an image arm, the
    `--overlay SRC:DEST` mounts."""

    name: str
    spec: EngineSpec
    dir: Path
    kit: Kit
    overlays: tuple[Overlay, ...] = ()


@dataclass
class RunContext:
    """What a run holds while it runs, apart from its arms: the engines started so far (so
    that any exit path can stop them) and the exporter and --on-stall of its wall-clock arms
    (None: forensics only)."""

    alerting: Alerting | None = None
    launchers: list[Launcher] = field(default_factory=list)


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
    """Put each event of one stream on the arm's queue, tagged with the stream's name."""
    try:
        async for event in events:
            await queue.put((name, event))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # handed to the arm, which decides; never lost in a task
        await queue.put((name, _Done(name, exc)))
        return
    await queue.put((name, _Done(name, None)))


#: wall seconds the simulator's clock is waited for at the end of a run that ran its course
#: (one that fell far behind its clock answers slowly: wait for it rather than guess)
END_CLOCK_WAIT_S = 30.0


async def _engine_time_s(url: str, timeout_s: float = END_CLOCK_WAIT_S) -> float | None:
    """The simulator's engine clock (None for real engines, which run on the wall clock, and
    for one that did not answer within `timeout_s`)."""
    clock = await sim_clock(url, timeout_s=timeout_s)
    return None if clock is None else clock.engine_s


def _end_clock_wait_s(end: ArmEnd, mon: MonitorConfig) -> float:
    """How long the end of an arm waits for the engine's clock: a run that ran its course
    waits for a slow simulator; one stopped otherwise (a stall, an error, Ctrl-C) waits no
    longer than a scrape, since a frozen engine never answers and the stop must not wait
    on it."""
    return END_CLOCK_WAIT_S if end.reason == "duration" else mon.scrape_timeout_s


async def _drive(
    arm: WallArm,
    launcher: Launcher,
    info: ServerInfo,
    load: LoadConfig,
    mon: MonitorConfig,
    gpu: GpuReader,
    recorder: ArmRecorder,
    view: RunView,
) -> EndReason:
    """Run agents and monitor together until the duration passes or a stall stop; the end reason.

    Raises EngineDied when the engine ends on its own meanwhile.
    """
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    # what the agents wait on is pending work, whatever the engine's gauges read
    waits = ClientWaits()
    streams: dict[str, AsyncIterator[Any]] = {
        "monitor": watch(
            launcher.url,
            mon,
            gpu,
            engine_cpu=launcher.cpu_seconds,
            client_pending=waits.waiting,
        ),
        "load": run_agents(info, load, records=recorder.turns),
        "engine": _watch_engine(launcher),
    }
    tasks = {name: asyncio.create_task(_pump(name, s, queue)) for name, s in streams.items()}
    try:
        while True:
            source, event = await queue.get()
            if isinstance(event, _Done):
                if event.error is not None:
                    raise event.error
                if source == "load":
                    return "duration"
            elif isinstance(event, _EngineExited):
                raise EngineDied(_died_message(launcher, event.reason))
            elif isinstance(event, RunFinished):
                # let the agents' generator finish its clean-up (it closes turns.jsonl and its
                # client); a cancel landing inside that clean-up would leak them
                await asyncio.wait({tasks["load"]}, timeout=10.0)
                return "duration"
            elif source == "load":
                waits.load(event)
                view.load(event)
            else:
                recorder.event(event)
                if isinstance(event, StopRequested):
                    stall_s = event.stall_s * view.scale
                    view.note(f"{arm.name}: stall for {stall_s:.1f} engine s: stopping the run")
                    return "stall_stop"
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


async def _gpu(arm: WallArm, launcher: Launcher, mon: MonitorConfig, view: RunView) -> GpuReader:
    """The reader of the kit's GPU source, `auto` resolved as `kit monitor` resolves it (the
    launcher's source, else the engine's own DCGM page); what auto asked the engine is noted."""
    source, why = await asyncio.to_thread(
        resolve_gpu_source, arm.kit.monitor.gpu_source, launcher.url, launcher.gpu_source
    )
    if why:
        hint = "; set monitor.gpu_source in the kit for GPU readings" if not source.checked else ""
        view.note(f"{arm.name}: gpu source {source} (auto: {why}{hint})")
    return gpu_source(source, timeout_s=mon.scrape_timeout_s)


async def _start(
    arm: WallArm,
    run: RunContext,
    launcher: Launcher,
    recorder: ArmRecorder,
    view: RunView,
    load: LoadConfig,
    mon: MonitorConfig,
) -> tuple[ServerInfo, GpuReader]:
    """Start the engine, wait for it, check it serves the load; its alerting joins the sinks."""
    view.note(f"{arm.name}: starting {arm.spec.raw}")
    await asyncio.to_thread(launcher.start)
    await asyncio.to_thread(launcher.wait_healthy, arm.kit.engine.startup_timeout_s)
    gpu = await _gpu(arm, launcher, mon, view)
    info = await preflight(launcher.url, load)
    view.note(f"{arm.name}: {launcher.url} healthy, model {info.model}; {load.agents} agents")
    if view.scale != 1.0:
        view.note(f"{arm.name}: engine runs at {view.scale:g}x; times and rates shown are engine's")
    hooks = (run.alerting or Alerting()).for_arm(
        arm.name, arm.spec, arm.dir, launcher, mon.stall_after_s
    )
    recorder.add(hooks, hooks.close)
    return info, gpu


async def run_arm(arm: WallArm, run: RunContext, console: Console, dashboard: bool) -> None:
    """Run one arm end to end; its directory is complete on every exit path."""
    scale = await kind_of(arm.spec).wall_scale(arm.kit, arm.spec)
    spec = arm.spec
    recorder = ArmRecorder.open(
        arm.dir,
        arm.kit,
        arm=arm.name,
        spec=spec.raw,
        kind=spec.kind,
        clock="wall",
        time_scale=scale,
        capabilities=spec.capabilities,
    )
    launcher = make_launcher(arm.name, arm.spec, arm.kit, arm.dir, list(arm.overlays))
    run.launchers.append(launcher)
    # in wall seconds at the arm's scale, once: the start, the agents and the monitor share them
    load, mon = load_config(arm.kit, scale), monitor_config(arm.kit, scale)
    view = RunView(console, arm.name, arm.spec.raw, load.duration_s or 0.0, dashboard, scale)
    recorder.add(view)
    end = ArmEnd("starting")
    t_load, engine_t0 = time.monotonic(), None
    try:
        info, gpu = await _start(arm, run, launcher, recorder, view, load, mon)
        engine_t0 = await _engine_time_s(launcher.url)
        t_load = time.monotonic()
        async with view.live(launcher.url):
            end = ArmEnd(await _drive(arm, launcher, info, load, mon, gpu, recorder, view))
    except (asyncio.CancelledError, KeyboardInterrupt):
        # Ctrl-C cancels the task; with Ctrl-C ignored (a script's background job) SIGTERM
        # raises KeyboardInterrupt wherever the loop is: both are the user stopping the run
        end = ArmEnd("interrupted")
        raise
    except EngineDied as exc:
        # a result, not a failure of the run: the other arm still runs and the table says so
        end = ArmEnd("engine_died", str(exc))
        view.note(f"{arm.name}: {str(exc).splitlines()[0]}")
    except BaseException as exc:
        end = ArmEnd("error", error_line(exc))
        raise
    finally:
        # the wall time is taken when the engine clock is read, so the two cover the same span
        wall_s = time.monotonic() - t_load
        engine_t1 = None
        if engine_t0 is not None:
            engine_t1 = await _engine_time_s(launcher.url, _end_clock_wait_s(end, mon))
        engine_s = None if engine_t1 is None or engine_t0 is None else engine_t1 - engine_t0
        await asyncio.to_thread(recorder.close_sinks)  # bundles and on-stall, before the stop
        # a frozen engine is continued and killed after the launcher's grace: never waited on
        with contextlib.suppress(Exception):
            await asyncio.to_thread(launcher.stop)
        meta = recorder.finish(replace(end, wall_s=wall_s, engine_s=engine_s))
        view.note(f"{arm.name}: {END_WORDS[meta.end_reason]} after {view.ran(meta)}")
