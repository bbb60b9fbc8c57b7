"""`kit ab`: the same kit and seeds on a base and a fix engine, then the table and the verdict.

Thin: parse flags into a validated plan (`stallkit.kits.ab.execute.Plan`), run it with
`kit run`'s plan runner, map `--strict` failures to exit 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stallkit.engine import spec_forms
from stallkit.kits.cli.alerting import (
    MetricsHostOpt,
    MetricsPortOpt,
    OnStallEndOpt,
    OnStallOpt,
    OnStallTimeoutOpt,
    start_alerting,
)
from stallkit.kits.cli.common import fail, user_errors
from stallkit.kits.cli.fields import NO_OVERRIDES, kit_overrides
from stallkit.kits.cli.run import (
    OVERRIDES,
    KitOpt,
    NoDashOpt,
    OutOpt,
    OverlayOpt,
    execute_plan,
    flag_names,
)

if TYPE_CHECKING:
    from stallkit.kits.ab.execute import Plan

#: `kit ab --strict` and `kit report --strict` when the fix arm fails a check
EXIT_STRICT = 1

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

    with flag_names(ctx):
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
    result = execute_plan(plan, no_dashboard, alerting)
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


def register(app: typer.Typer) -> None:
    """Add `kit ab` to the command line."""
    app.command("ab")(ab)
