"""Execute `kit sweep`: write the plan and the cells' kits, run what is missing, then the reports.

The plan (`sweep-plan.json`) is written before the first run; a directory that already holds
one is resumed with `--resume` (its plan stands) and refused otherwise. Each finished run is
appended to `sweep-runs.jsonl` at once; whatever ends the sweep (its last run, Ctrl-C, a failed run),
`sweep.json` and `sweep.html` are made from the runs recorded. Progress is a rich progress
bar (runs done, runs per second, time left, stalls per arm so far) or, without the dashboard,
a line every few seconds.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from stallkit.contract.files import outermost_missing
from stallkit.contract.jsonl import JsonlWriter, read_json, read_jsonl, write_json
from stallkit.contract.sweep import SWEEP_PLAN_FILE, SWEEP_RUNS_FILE, SweepFile, SweepPlan, SweepRun
from stallkit.engine import EngineSpec
from stallkit.kits.arm.kinds import check_arm_kinds
from stallkit.kits.errors import KitError
from stallkit.kits.kit import load_kit
from stallkit.kits.sweep.plan import jobs, plan_specs
from stallkit.kits.sweep.runners import (
    check_ray_arms,
    cores,
    local_pools,
    ray_session,
    run_local,
    run_ray,
    write_cell_kits,
)

__all__ = ["SweepResult", "execute_sweep", "existing_plan"]


@dataclass
class SweepResult:
    """What `execute_sweep` returns: the sweep file (when any run was recorded), how it ended."""

    content: SweepFile | None
    ran: int
    interrupted: bool


def existing_plan(out: Path) -> SweepPlan | None:
    """The plan of the sweep in `out` (None: no sweep there)."""
    path = out / SWEEP_PLAN_FILE
    return read_json(path, SweepPlan) if path.exists() else None


class _Progress:
    """Runs done, runs per second, time left and stalls so far; a bar or plain lines."""

    def __init__(self, console: Console, total: int, dashboard: bool) -> None:
        self.console, self.total, self.done = console, total, 0
        self.stalls: Counter[str] = Counter()
        self.start = self.last_line = time.monotonic()
        self.bar: Progress | None = None
        if dashboard:
            self.bar = Progress(
                TextColumn("[bold]sweep"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} runs/s"),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[stalls]}"),
                console=console,
                transient=False,
            )
            self.task = self.bar.add_task("sweep", total=total, rate="-", stalls="")

    def __enter__(self) -> _Progress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def _stalls(self) -> str:
        return "stalls: " + ", ".join(f"{a} {n}" for a, n in sorted(self.stalls.items()))

    def add(self, run: SweepRun) -> None:
        self.done += 1
        self.stalls[run.arm] += int(run.stalled)
        now = time.monotonic()
        rate = self.done / max(now - self.start, 1e-9)
        if self.bar is not None:
            self.bar.update(self.task, advance=1, rate=f"{rate:.1f}", stalls=self._stalls())
        elif now - self.last_line >= 5 or self.done == self.total:
            self.last_line = now
            left = (self.total - self.done) / rate
            self.console.print(
                f"sweep: {self.done}/{self.total} runs, {rate:.1f} runs/s, "
                f"{left:.0f} s left; {self._stalls()}"
            )


def _prepare(out: Path, plan: SweepPlan, resume: bool) -> SweepPlan:
    """The plan to run in `out`: the one there when resuming (it must exist), else `plan`."""
    there = existing_plan(out)
    if resume:
        if there is None:
            raise KitError(f"{out} holds no sweep to resume", "give the --out of a sweep")
        return there
    if there is not None:
        raise KitError(
            f"{out} already holds a sweep", "add --resume to finish it, or choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / SWEEP_PLAN_FILE, plan)
    return plan


def execute_sweep(
    plan: SweepPlan,
    out: Path,
    *,
    resume: bool = False,
    ray_address: str | None = None,
    workers: int | None = None,
    dashboard: bool = True,
    console: Console | None = None,
) -> SweepResult:
    """Run every run of the plan not yet in `out`, appending each; then write the reports.

    With `ray_address` the cluster is reached first: a cluster that is not there is an error
    before anything is written.
    """
    kit = load_kit(plan.kit, plan.fixed)  # a resumed plan's twin arms: vLLM still here?
    specs = plan_specs(plan)  # parsed once: what every run of an arm is handed
    check_arm_kinds(kit, specs)
    if ray_address:
        check_ray_arms(kit, specs)
    session = ray_session(ray_address) if ray_address else contextlib.nullcontext()
    with session:
        console = console or Console()
        return _execute(plan, specs, out, resume, ray_address, workers, dashboard, console)


def _execute(
    plan: SweepPlan,
    specs: dict[str, EngineSpec],
    out: Path,
    resume: bool,
    ray_address: str | None,
    workers: int | None,
    dashboard: bool,
    console: Console,
) -> SweepResult:
    from stallkit.reports import write_sweep_reports

    made = outermost_missing(out)
    plan = _prepare(out, plan, resume)
    kit_data = load_kit(plan.kit).model_dump(mode="json")
    if made is not None or not resume:
        write_cell_kits(out, kit_data, plan)
    done = read_jsonl(out / SWEEP_RUNS_FILE, SweepRun, missing_ok=True)
    todo = jobs(plan, specs, done)
    where = f"Ray at {ray_address}" if ray_address else f"{workers or cores()} local processes"
    console.print(
        f"sweep of {plan.kit_name}: {len(plan.cells())} cells x {len(plan.seeds)} seeds x "
        f"{len(plan.arms)} arms, {plan.duration_s:g} engine s each; {len(todo)} runs to go "
        f"({len(done)} recorded) on {where}; out: {out}"
    )
    interrupted = False
    ran = 0
    try:
        with (
            JsonlWriter(out / SWEEP_RUNS_FILE) as writer,
            _Progress(console, len(todo), dashboard) as progress,
        ):

            def on_run(run: SweepRun) -> None:
                nonlocal ran
                writer.write(run)
                ran += 1
                progress.add(run)

            try:
                if ray_address:
                    run_ray(kit_data, plan, todo, on_run, ray_address)
                else:
                    local = workers or min(cores(), len(todo) or 1)
                    with local_pools(kit_data, specs, local) as pools:
                        run_local(kit_data, plan, todo, on_run, pools)
            except KeyboardInterrupt:
                interrupted = True
    finally:  # whatever ended the sweep (a run that failed too), the reports of what ran
        content = write_sweep_reports(out) if (done or ran) else None
    return SweepResult(content, ran, interrupted)
