"""Plan and execute `kit run` / `kit ab`: arms, run directories, the reports at the end.

A plan is validated before anything starts (kit, specs, overlays, GPU sets, output
directory). Execution runs the arms one after the other (or at once with --parallel),
guarantees every engine is stopped on success, error, Ctrl-C and SIGTERM, and then makes
the A/B reports from the saved directories.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from engine.docker import Overlay
from engine.launcher import Launcher
from engine.spec import EngineSpec, parse_spec
from kits.config import Kit, load_kit
from kits.errors import KitError
from kits.launch import time_scale
from reports.ab import ABReport

DEFAULT_RUNS_DIR = Path("kit-runs")


@dataclass(frozen=True)
class Arm:
    """One engine under test and its run directory."""

    name: str
    spec: EngineSpec
    dir: Path


@dataclass
class Plan:
    """Everything decided before the first engine starts."""

    kit: Kit
    arms: list[Arm]
    out_dir: Path
    parallel: bool = False
    overlays: list[Overlay] = field(default_factory=list)
    #: launchers started so far, so that any exit path can stop them
    launchers: list[Launcher] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        kit_name: str,
        specs: dict[str, str],
        out: Path | None,
        overrides: dict[str, Any],
        overlays: list[str],
        parallel: bool = False,
    ) -> Plan:
        kit = load_kit(kit_name, overrides)
        parsed = {name: parse_spec(raw) for name, raw in specs.items()}
        overlay_objs = [Overlay.parse(text) for text in overlays]
        if overlay_objs and not any(s.kind == "docker" for s in parsed.values()):
            raise KitError(
                "--overlay applies to docker image arms only", "drop --overlay or use an image spec"
            )
        if parallel:
            _check_disjoint_gpus(kit, parsed)
        out_dir = (
            out
            if out is not None
            else DEFAULT_RUNS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-{kit.name}"
        )
        if out_dir.exists() and any(out_dir.iterdir()):
            raise KitError(
                f"{out_dir} already holds files",
                "choose a new --out; nothing recorded is overwritten",
            )
        single = len(parsed) == 1
        arms = [
            Arm(name, spec, out_dir if single else out_dir / name) for name, spec in parsed.items()
        ]
        return cls(kit, arms, out_dir, parallel, overlay_objs)

    def describe(self) -> str:
        lines = [
            f"kit {self.kit.name}: {self.kit.description}".rstrip(": "),
            f"out: {self.out_dir}",
        ]
        for arm in self.arms:
            gpus = self.kit.engine.gpus_for(arm.name) if arm.spec.kind == "docker" else []
            scale = time_scale(arm.spec, self.kit)
            host = self.kit.engine.host_for(arm.name).docker_host
            where = f"; docker host {host}" if arm.spec.kind == "docker" and host else ""
            lines.append(
                f"  {arm.name}: {arm.spec.raw} ({arm.spec.kind}; gpus {gpus or '-'}; time scale {scale:g}{where})"
            )
        load = self.kit.load
        lines.append(
            f"load: {load.agents} agents, contexts {load.min_context}-{load.max_context} tokens, "
            f"{load.duration_s:g} engine s, seed {load.seed}; "
            f"stall after {self.kit.monitor.stall_after_s:g} s, stop after {self.kit.monitor.stop_after_s} s"
        )
        lines.append("mode: " + ("parallel" if self.parallel else "sequential"))
        return "\n".join(lines)


def _check_disjoint_gpus(kit: Kit, specs: dict[str, EngineSpec]) -> None:
    seen: dict[tuple[str, int], str] = {}
    for name, spec in specs.items():
        if spec.kind != "docker":
            continue
        host = kit.engine.host_for(name).docker_host  # GPUs of different hosts never clash
        for gpu in kit.engine.gpus_for(name):
            if (host, gpu) in seen:
                raise KitError(
                    f"--parallel refused: arms {seen[host, gpu]} and {name} both use GPU {gpu}",
                    "give the arms disjoint sets with [engine.arm_gpus] in the kit, or run sequentially",
                )
            seen[host, gpu] = name


@dataclass
class Result:
    """What `execute` returns: the report (when one could be made) and how it ended."""

    report: ABReport | None
    interrupted: bool


def strict_failures(report: ABReport) -> list[str]:
    """Reasons a CI run fails: the fix arm (or the only arm) died, stalled or logged a traceback."""
    name = "fix" if "fix" in report.arms else next(iter(report.arms))
    arm = report.arms[name]
    problems = []
    if arm.end_reason == "engine_died":
        problems.append(f"{name} arm's engine died")
    if arm.stalls:
        problems.append(f"{name} arm stalled {len(arm.stalls)} time(s)")
    if arm.log_counts.get("tracebacks", 0):
        problems.append(f"{name} arm logged {arm.log_counts['tracebacks']} traceback(s)")
    return problems


async def _run_all(plan: Plan, console: Console, dashboard: bool) -> None:
    from kits.run import run_arm

    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        if plan.parallel:
            await asyncio.gather(*(run_arm(arm, plan, console, dashboard) for arm in plan.arms))
        else:
            for arm in plan.arms:
                await run_arm(arm, plan, console, dashboard)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)


#: files the run writes about itself; anything else in a run directory was recorded
_BOOKKEEPING = {"kit.json", "meta.json", "summary.json", "sim-config.toml"}


def _discard_if_unrecorded(plan: Plan) -> bool:
    """Remove a failed run's directory when it recorded nothing (no turn, sample or log line).

    Only the files the run itself wrote are removed, and only when nothing else is there;
    whatever was recorded is kept. Returns whether the directory is gone.
    """
    files = [p for p in plan.out_dir.rglob("*") if p.is_file()]
    if any(p.name not in _BOOKKEEPING and p.stat().st_size > 0 for p in files):
        return False
    for path in files:
        path.unlink()
    for directory in sorted(plan.out_dir.rglob("*"), reverse=True):
        directory.rmdir()
    plan.out_dir.rmdir()
    return True


def execute(plan: Plan, dashboard: bool = True, console: Console | None = None) -> Result:
    """Run every arm, then write and print the reports. Engines are stopped on every path."""
    from reports.ab import write_reports
    from reports.view import ab_table

    console = console or Console()
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    (plan.out_dir / "kit.json").write_text(
        plan.kit.model_dump_json(indent=2) + "\n", encoding="utf-8"
    )
    interrupted = False
    try:
        try:
            asyncio.run(_run_all(plan, console, dashboard))
        except (KeyboardInterrupt, asyncio.CancelledError):
            interrupted = True
        finally:
            for launcher in plan.launchers:
                launcher.stop()
    except Exception:
        _discard_if_unrecorded(plan)
        raise
    if interrupted and _discard_if_unrecorded(plan):
        return Result(None, interrupted)
    report = None
    if any((arm.dir / "meta.json").exists() for arm in plan.arms):
        report = write_reports(plan.out_dir)
        console.print(ab_table(report))
        stem = report.stem
        console.print(f"[dim]reports: {plan.out_dir / stem}.md, {stem}.json, timeline.png[/]")
    return Result(report, interrupted)
