"""Execute a `kit run` / `kit ab` plan: every arm over every seed, then the A/B reports.

Virtual-clock arms (`sim:` and `twin:`) run in parallel processes across the cores (one job
per arm and seed, each writing its own directory), one line as each ends; wall-clock arms run
one seed after another (both arms at once with --parallel). `plan.json` says first what the run
is to run, so that a report of a run cut short can say what it lacks. Every engine is stopped on
success, error and Ctrl-C (SIGTERM reaches here as Ctrl-C:
`stallkit.kits.cli.common.sigterm_as_ctrl_c`); a Ctrl-C says at once what it stops, and the
A/B reports are made from the saved directories whatever ended the run (a run cut short gets
no verdict, `stallkit.reports.partial_run`, and only its tables: `kit report` draws the rest).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from stallkit.contract.ab import PLAN_FILE, RunPlan
from stallkit.contract.errors import StallkitError
from stallkit.contract.files import KIT_FILE, discard_if_unrecorded, outermost_missing
from stallkit.contract.jsonl import read_json, write_json
from stallkit.contract.kitfile import KitFile
from stallkit.contract.meta import END_WORDS, META_FILE, ArmMeta
from stallkit.contract.slo import figure_spec
from stallkit.engine import Launcher, reset_prefix_cache
from stallkit.kits.ab.plan import DEFAULT_RUNS_DIR, Arm, Plan
from stallkit.kits.arm.alerting import Alerting
from stallkit.kits.arm.kinds import kind_of
from stallkit.kits.arm.virtual import VirtualResult, run_virtual_arm
from stallkit.kits.arm.wall import RunContext, WallArm, run_arm
from stallkit.kits.workers import PooledJob, Stopping, cores, run_pooled, worker_kind
from stallkit.reports import ABReport

__all__ = ["DEFAULT_RUNS_DIR", "Arm", "Plan", "Result", "execute", "strict_failures"]


@dataclass
class Result:
    """What `execute` returns: the report (when one could be made) and how it ended."""

    report: ABReport | None
    interrupted: bool


def strict_failures(report: ABReport) -> list[str]:
    """Reasons a CI run fails: the fix arm (or the only arm) stalled in a seed, logged a
    traceback, or was not observed for its full length (its engine died, it failed, it was
    interrupted, its metrics were down at the end) in any seed; or, with the kit's SLOs, the
    fix was shown worse than the base by more than the margin on a tested figure."""
    name = "fix" if "fix" in report.arms else next(iter(report.arms))
    arm = report.arms[name]
    problems = []
    rows = report.seeds.get(name, [])
    of = f" in {{}} of {len(rows)} seeds" if len(rows) > 1 else ""
    died = sum(r.end_reason == "engine_died" for r in rows)
    if died:
        problems.append(f"{name} arm's engine died" + of.format(died))
    other = [r.censored for r in rows if r.censored not in (None, "engine_died")]
    if other:
        why = ", ".join(sorted(set(map(str, other))))
        problems.append(f"{name} arm was censored ({why})" + of.format(len(other)))
    stalled = sum(r.stalled for r in rows)
    if len(rows) > 1 and stalled:
        problems.append(f"{name} arm stalled in {stalled} of {len(rows)} seeds")
    elif arm.stalls:
        problems.append(f"{name} arm stalled {len(arm.stalls)} time(s)")
    if arm.log_counts.get("tracebacks", 0):
        problems.append(f"{name} arm logged {arm.log_counts['tracebacks']} traceback(s)")
    regressions = report.verdict.regressions if report.verdict is not None else []
    for test in regressions:  # shown worse than the base by more than the kit's margin
        problems.append(
            f"fix is worse than base by more than {test.margin_pct:g} % on "
            f"{figure_spec(test.figure).sentence_name} ({test.worse_pct:+.1f} %)"
        )
    return problems


async def _run_all(
    arms: list[WallArm], parallel: bool, run: RunContext, console: Console, dashboard: bool
) -> None:
    if parallel:
        await asyncio.gather(*(run_arm(arm, run, console, dashboard) for arm in arms))
    else:
        for arm in arms:
            await run_arm(arm, run, console, dashboard)


def _note(console: Console, done: VirtualResult) -> None:
    """One seed's end in a line that fits 80 columns: `base seed 9: stalled, stopped at
    2872 engine s (2.7 wall s)`."""
    at = f"{done.engine_s:.0f} engine s"
    if done.end_reason == "stall_stop":
        what = f"stalled, stopped by the monitor at {at}"
    elif done.end_reason == "duration":
        what = f"ran {at}" + (", stalled" if done.stalled else ", no stall")
    else:
        what = f"{END_WORDS[done.end_reason]} at {at}"
    console.print(f"{done.arm} seed {done.seed}: {what} [dim]({done.wall_s:.1f} wall s)[/]")


def _cut_note(console: Console, arm: str, seed: int, seed_dir: Path) -> None:
    """A run's end after a Ctrl-C, from what it recorded: `fix seed 11: interrupted at 1922
    engine s` (or the end it reached before the signal); a run stopped before it recorded
    anything leaves no directory."""
    try:
        meta = read_json(seed_dir / META_FILE, ArmMeta)
    except (StallkitError, OSError):
        discard_if_unrecorded(seed_dir)
        console.print(f"{arm} seed {seed}: stopped before it started", highlight=False)
        return
    at = "" if meta.engine_s is None else f" at {meta.engine_s:.0f} engine s"
    what = END_WORDS[meta.end_reason]
    if meta.end_reason == "starting":  # its worker was terminated before it could say
        what = "stopped before it recorded its end"
    console.print(f"{arm} seed {seed}: {what}{at}", highlight=False)


def _stopping_note(console: Console, plan: Plan, stop: Stopping) -> None:
    """What a Ctrl-C stops, said the moment it lands."""
    console.print(
        f"[bold]stopping:[/] {stop.going} run{'s' * (stop.going != 1)} going, "
        f"{stop.not_started} not started; "
        f"partial results go to {plan.out_dir}",
        highlight=False,
    )


def _run_virtual(plan: Plan, console: Console) -> None:
    """Every virtual arm over every seed, in parallel processes across the cores (twin arms
    in fresh workers of their own, one pool per overlay: `stallkit.kits.workers`)."""
    jobs: list[PooledJob] = []
    for seed in plan.seeds:
        for arm in plan.arms:
            if plan.virtual(arm):
                kit = plan.kit_for(seed)
                args = (kit, arm.name, arm.spec, plan.seed_dir(arm, seed))
                jobs.append((worker_kind(kit, arm.name, arm.spec), args))
    if not jobs:
        return
    workers = min(cores(), len(jobs))
    if len(jobs) > 1:
        arms = len(jobs) // len(plan.seeds)
        where = f"{workers} worker processes" if workers > 1 else "this process"
        console.print(
            f"running {arms} arms x {len(plan.seeds)} seeds in {where} (Ctrl-C stops them)",
            highlight=False,
        )
    run_pooled(
        run_virtual_arm,
        jobs,
        lambda done: _note(console, done),
        cores(),
        on_stop=lambda stop: _stopping_note(console, plan, stop),
        on_cut=lambda args: _cut_note(console, args[1], args[0].load.seed, args[3]),
    )


def _run_wall(plan: Plan, run: RunContext, console: Console, dashboard: bool) -> None:
    """The wall-clock arms, one seed after another."""
    arms = [arm for arm in plan.arms if not plan.virtual(arm)]
    if not arms:
        return
    for seed in plan.seeds:
        kit, overlays = plan.kit_for(seed), tuple(plan.overlays)
        seeded = [
            WallArm(arm.name, arm.spec, plan.seed_dir(arm, seed), kit, overlays) for arm in arms
        ]
        resets = _reset_kept_engines(arms)
        _run_loop(_run_all(seeded, plan.parallel, run, console, dashboard))
        for arm, said in resets:
            _note_prefix_cache(plan.seed_dir(arm, seed), said)


def _reset_kept_engines(arms: list[Arm]) -> list[tuple[Arm, str]]:
    """Drop the prefix cache of each engine kept across seeds (an attached one: every other
    engine starts with its seed, its cache empty), so seeds do not warm each other; per arm,
    `reset` or why not."""
    return [
        (arm, reset_prefix_cache(arm.spec.target) or "reset")
        for arm in arms
        if kind_of(arm.spec).attaches
    ]


def _note_prefix_cache(seed_dir: Path, said: str) -> None:
    """Say in the seed's meta.json whether its engine's prefix cache was reset before it."""
    with contextlib.suppress(StallkitError, OSError):
        meta = read_json(seed_dir / META_FILE, ArmMeta)
        write_json(seed_dir / META_FILE, meta.update(prefix_cache=said))


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    """`asyncio.run(main)`; a Ctrl-C landing as the loop finishes its task is still Ctrl-C
    (asyncio then reports the loop it stopped, not the interrupt)."""
    try:
        asyncio.run(main)
    except RuntimeError as exc:
        if "Event loop stopped before Future completed" in str(exc):
            raise KeyboardInterrupt from None
        raise


def _stop_all(launchers: list[Launcher]) -> None:
    """Stop every engine, even when one stop fails or a second Ctrl-C lands during the stops;
    then raise the first of those."""
    first: BaseException | None = None
    for launcher in launchers:
        try:
            launcher.stop()
        except BaseException as exc:  # re-raised once the others are stopped
            first = first or exc
    if first is not None:
        raise first


def mark_interrupted(out_dir: Path) -> None:
    """After a Ctrl-C, the seeds whose end was never recorded (a worker stopped before it
    could write it) end as interrupted, which is what happened to them."""
    for path in out_dir.rglob(META_FILE):
        with contextlib.suppress(StallkitError, OSError):
            meta = read_json(path, ArmMeta)
            if meta.end_reason == "starting":
                write_json(path, meta.update(end_reason="interrupted"))


def execute(
    plan: Plan,
    dashboard: bool = True,
    console: Console | None = None,
    alerting: Alerting | None = None,
) -> Result:
    """Run every arm over every seed, then write and print the reports. Engines always stop.

    `alerting`: the exporter and --on-stall of wall-clock arms (None: forensics only).
    """
    from stallkit.reports import ab_table, write_reports

    # notes carry their time, not the source line that printed them
    console = console or Console(log_path=False)
    run = RunContext(alerting)
    # a directory the user made (an empty --out) is theirs: never removed, even if unused
    made = outermost_missing(plan.out_dir)
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    write_json(plan.out_dir / KIT_FILE, KitFile.of(plan.kit.model_dump(mode="json")))
    arms = {arm.name: arm.spec.raw for arm in plan.arms}
    write_json(plan.out_dir / PLAN_FILE, RunPlan(arms=arms, seeds=plan.seeds))
    interrupted = False
    try:
        try:
            _run_virtual(plan, console)
            _run_wall(plan, run, console, dashboard)
        except (KeyboardInterrupt, asyncio.CancelledError):
            interrupted = True
        finally:
            _stop_all(run.launchers)
    except Exception:
        if made is not None:
            discard_if_unrecorded(plan.out_dir, made)
        raise
    if interrupted and made is not None and discard_if_unrecorded(plan.out_dir, made):
        return Result(None, interrupted)
    if interrupted:
        mark_interrupted(plan.out_dir)
    report = None
    if any(plan.out_dir.rglob("meta.json")):
        if interrupted:
            console.print("writing the tables of what was recorded (Ctrl-C again skips them)")
        # after a Ctrl-C a seed's files may be torn: report what was recorded, naming them; a
        # run cut short gets no verdict (`kit report --partial` makes one), and its exit waits
        # for no plot (`kit report` draws them)
        report = write_reports(plan.out_dir, damaged_ok=interrupted, drawn=not interrupted)
        console.print(ab_table(report))
        stem = report.stem
        written = f"{plan.out_dir / stem}.md, {stem}.json"
        if not interrupted:
            written = f"{plan.out_dir / stem}.html, {written}, timeline.png"
        console.print(f"[dim]reports: {written}[/]")
    return Result(report, interrupted)
