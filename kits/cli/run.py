"""`kit run`, `kit ab` and `kit report`: the product's main job.

Thin: parse flags into a validated kit and plan, run it, map errors to exit codes. The
orchestration lives in `stallkit.kits.arm.wall` and `stallkit.kits.ab.execute`; the tables in `reports`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stallkit.engine import spec_forms, spec_usage
from stallkit.kits.cli.alerting import (
    MetricsHostOpt,
    MetricsPortOpt,
    OnStallEndOpt,
    OnStallOpt,
    OnStallTimeoutOpt,
    start_alerting,
)
from stallkit.kits.cli.common import ctrl_c, fail, interrupted, user_errors
from stallkit.kits.cli.fields import NO_OVERRIDES, flags_by_override, kit_overrides

if TYPE_CHECKING:
    from stallkit.kits.ab.execute import Plan, Result
    from stallkit.kits.arm.alerting import Alerting

EXIT_STRICT = 1
#: `kit run` whose engine ended on its own during the run
EXIT_ENGINE_DIED = 1

KitOpt = Annotated[
    str,
    typer.Option(
        "--kit",
        "-k",
        metavar="KIT",
        help="Kit name (shipped, e.g. restore-stall, cpu-smoke) or path to a .toml",
    ),
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="Run directory (default ./kit-runs/<time>-<kit>/)"),
]
#: the kit's settings `kit run` and `kit ab` override, each with the flag its field declares
OVERRIDES = (
    "load.duration_s",
    "sim.time_scale",
    "load.seed",
    "load.agents",
    "load.min_context",
    "load.max_context",
    "load.trace",
    "load.trace_auto_offset",
    "load.trace_start_offset_ms",
    "load.trace_end_offset_ms",
    "load.trace_salt",
)
OverlayOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--overlay",
        help="Docker arms: SRC:DEST bind-mounted read-only over DEST in the image. Twin arms: "
        "TREE (every twin arm) or ARM=TREE, a source tree whose vllm/ files shadow the installed "
        "vLLM's (a fork's checkout, or only its changed files). Repeatable",
    ),
]
SeedsOpt = Annotated[
    str | None,
    typer.Option(
        "--seeds",
        help="Run each arm over several seeds: N (N seeds from the kit's seed), A-B or A,B,C. "
        "Default: 10 seeds from the kit's seed when every arm is sim: or twin:, --clock is "
        "virtual and --seed is not given; else one seed (--seed, or the kit's)",
    ),
]
ClockOpt = Annotated[
    str,
    typer.Option(
        "--clock",
        metavar="[virtual|wall]",
        help="Clock of sim: arms: virtual (in process on engine time, deterministic) or wall "
        "(served over HTTP at the kit's time scale); twin: arms always run on the virtual clock",
    ),
]
NoDashOpt = Annotated[
    bool, typer.Option("--no-dashboard", help="Plain log lines instead of the live dashboard")
]


@contextlib.contextmanager
def _flag_names(ctx: typer.Context) -> Iterator[None]:
    """Report a flag's value that fails the kit's validation under the flag's name."""
    from stallkit.kits.errors import KitError, OverrideError

    try:
        yield
    except OverrideError as exc:
        by_key = flags_by_override(ctx)
        flags = [by_key.get(key, key) for key in exc.keys]
        message = str(exc)
        if len(exc.keys) == 1 and f" {exc.keys[0]}:" in message:
            message = message.replace(exc.keys[0], flags[0], 1)
        else:
            message += f" (set by {', '.join(flags)})"
        raise KitError(message, "see the command's --help") from None


def _wall_only(plan: Plan, asked: bool) -> None:
    """--metrics-port and --on-stall serve wall-clock arms: refuse them where no arm is one,
    and say which arms they skip where some are."""
    from stallkit.kits.cli.common import err_console

    virtual = [arm.spec.raw for arm in plan.arms if plan.virtual(arm)]
    if not asked or not virtual:
        return
    if len(virtual) == len(plan.arms):
        raise fail(
            "--metrics-port and --on-stall serve wall-clock arms, and every arm here runs on "
            "the virtual clock (each stall still keeps its forensics bundle)",
            "add --clock wall to serve the simulator arms over HTTP",
        )
    err_console.print(
        f"note: --metrics-port and --on-stall skip the virtual-clock arms ({', '.join(virtual)})",
        highlight=False,
    )


def _execute(plan: Plan, no_dashboard: bool, alerting: Alerting | None) -> Result:
    """Run a plan; an interrupted run exits 130 after its partial results are written."""
    from stallkit.kits.ab.execute import execute

    try:
        with ctrl_c() as stop:  # the arms take Ctrl-C themselves: this one came after them
            result = execute(plan, dashboard=not no_dashboard, alerting=alerting)
    finally:
        if alerting is not None:
            alerting.close()
    if stop.pressed:  # everything the arms recorded is on disk, only the reports are missing
        raise interrupted(
            f"interrupted while writing the reports; the run is kept in {plan.out_dir}",
            f"make them with `kit report {plan.out_dir}`",
        )
    if result.interrupted and not plan.out_dir.exists():
        raise interrupted("interrupted before anything was recorded")
    if result.interrupted:
        report = result.report
        hint = f"`kit report {plan.out_dir}` draws its timeline and HTML report"
        if report is not None and report.partial_run is not None and report.stem == "ab":
            hint = (
                f"`kit report --partial {plan.out_dir}` makes the verdict over the seeds "
                "recorded, with the timeline and HTML report"
            )
        raise interrupted(f"interrupted; partial results kept in {plan.out_dir}", hint)
    return result


@user_errors
@kit_overrides(*OVERRIDES)
def run(
    ctx: typer.Context,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            "-e",
            metavar="SPEC",
            help=f"Engine spec: {spec_usage()}",
        ),
    ],
    kit: KitOpt = "restore-stall",
    out: OutOpt = None,
    overrides: Mapping[str, Any] = NO_OVERRIDES,
    overlay: OverlayOpt = None,
    no_dashboard: NoDashOpt = False,
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = "127.0.0.1",
    on_stall: OnStallOpt = None,
    on_stall_end: OnStallEndOpt = False,
    on_stall_timeout: OnStallTimeoutOpt = 60.0,
) -> None:
    """Run one arm: launch the engine, drive the agents, watch for stalls, write the run directory."""
    from stallkit.kits.ab.execute import Plan

    with _flag_names(ctx):
        plan = Plan.build(
            kit,
            {"run": engine},
            out,
            dict(overrides),
            overlay or [],
        )
    alerting = start_alerting(metrics_port, metrics_host, on_stall, on_stall_end, on_stall_timeout)
    result = _execute(plan, no_dashboard, alerting)
    arm = next(iter(result.report.arms.values())) if result.report is not None else None
    if arm is not None and arm.end_reason == "engine_died":
        raise fail(
            f"the engine died during the run; partial results kept in {plan.out_dir}",
            f"read {plan.out_dir / 'engine.log'}",
            code=EXIT_ENGINE_DIED,
        )


@user_errors
@kit_overrides(*OVERRIDES)
def ab(
    ctx: typer.Context,
    base: Annotated[
        str,
        typer.Option(
            "--base",
            metavar="SPEC",
            help=f"Spec of the base arm: {spec_forms()}",
        ),
    ] = "sim:base",
    fix: Annotated[
        str, typer.Option("--fix", metavar="SPEC", help="Spec of the fix arm (the same forms)")
    ] = "sim:fix",
    kit: KitOpt = "restore-stall",
    out: OutOpt = None,
    parallel: Annotated[
        bool,
        typer.Option(
            "--parallel", help="Run both arms at once (refused when their GPU sets overlap)"
        ),
    ] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Exit 1 when the fix arm stalls, dies, is cut short or logs a traceback in any "
            "seed, or (a kit with [slo]) is shown worse than base by more than the kit's margin "
            "on a tested figure (for CI)",
        ),
    ] = False,
    overrides: Mapping[str, Any] = NO_OVERRIDES,
    overlay: OverlayOpt = None,
    no_dashboard: NoDashOpt = False,
    seeds: SeedsOpt = None,
    clock: ClockOpt = "virtual",
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Validate the kit and specs, print the plan, start nothing"),
    ] = False,
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = "127.0.0.1",
    on_stall: OnStallOpt = None,
    on_stall_end: OnStallEndOpt = False,
    on_stall_timeout: OnStallTimeoutOpt = 60.0,
) -> None:
    """A/B: the same kit and seeds on a base and a fix engine, then the table and the verdict.

    With no arguments: the restore-stall kit on sim:base versus sim:fix on the virtual clock over
    10 seeds, under a minute on a laptop.
    """
    from stallkit.kits.ab.execute import Plan, strict_failures

    if clock not in ("virtual", "wall"):
        raise fail(f"--clock {clock!r} is not a clock", "use --clock virtual or --clock wall")

    with _flag_names(ctx):
        plan = Plan.build(
            kit,
            {"base": base, "fix": fix},
            out,
            dict(overrides),
            overlay or [],
            parallel=parallel,
            seeds=seeds,
            clock="virtual" if clock == "virtual" else "wall",
        )
    _wall_only(plan, metrics_port is not None or on_stall is not None)
    if dry_run:
        typer.echo(plan.describe())
        return
    alerting = start_alerting(metrics_port, metrics_host, on_stall, on_stall_end, on_stall_timeout)
    _print_plan(plan)
    result = _execute(plan, no_dashboard, alerting)
    if strict and result.report is not None:
        problems = strict_failures(result.report)
        if problems:
            raise fail(
                "strict: " + "; ".join(problems),
                f"see {plan.out_dir / result.report.stem}.md",
                code=EXIT_STRICT,
            )


def _print_plan(plan: Plan) -> None:
    """What `kit ab` is about to run (what --dry-run prints), before anything starts."""
    from rich.console import Console

    Console().print(plan.describe(), markup=False, highlight=False)


@user_errors
def report(
    run_dir: Annotated[Path, typer.Argument(help="A directory written by `kit ab` or `kit run`")],
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Exit 1 when the fix arm stalled, died, was cut short or logged a traceback in "
            "any seed, as `kit ab --strict` does",
        ),
    ] = False,
    partial: Annotated[
        bool,
        typer.Option(
            "--partial",
            help="Report over what the run holds: a run cut short (Ctrl-C) gets its verdict over "
            "the seeds recorded (without it: 'interrupted: partial, N of M seeds' in its place); "
            "when some seeds' files cannot be read, the report covers the readable seeds and "
            "lists the damaged ones (without it: exit 1, naming each damaged seed and file)",
        ),
    ] = False,
) -> None:
    """Re-make ab.html, ab.md, ab.json (run.* for one arm) and timeline.png; print the table."""
    from rich.console import Console

    from stallkit.kits.ab.execute import strict_failures
    from stallkit.reports import DamagedRunError, ab_table, write_reports

    try:
        result = write_reports(run_dir, partial)
    except DamagedRunError as exc:  # the run's data, not the command line: exit 1
        raise fail(exc.message, exc.hint, code=1) from None
    Console().print(ab_table(result))
    stem = run_dir / result.stem
    typer.echo(f"wrote {stem}.html, {stem}.md, {stem}.json, {run_dir / 'timeline.png'}")
    cut = result.partial_run
    if cut is not None and not cut.verdict_given and result.stem == "ab":
        Console().print(
            f"no verdict: the run was cut short; `kit report --partial {run_dir}` makes one over "
            "the seeds recorded",
            markup=False,
            highlight=False,
        )
    problems = strict_failures(result) if strict else []
    if problems:
        raise fail("strict: " + "; ".join(problems), f"see {stem}.md", code=EXIT_STRICT)


def register(app: typer.Typer) -> None:
    """Add run, ab and report to the top-level app."""
    app.command("run")(run)
    app.command("ab")(ab)
    app.command("report")(report)
