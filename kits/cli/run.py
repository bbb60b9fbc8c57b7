"""`kit run`: one arm of a kit, and what it shares with `kit ab` (the kit, output, override and
overlay flags; running a plan with Ctrl-C kept).

Thin: parse flags into a validated kit and plan, run it, map errors to exit codes. The
orchestration lives in `stallkit.kits.arm.wall` and `stallkit.kits.ab.execute`; the tables in `reports`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stallkit.engine import spec_usage
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
NoDashOpt = Annotated[
    bool, typer.Option("--no-dashboard", help="Plain log lines instead of the live dashboard")
]


@contextlib.contextmanager
def flag_names(ctx: typer.Context) -> Iterator[None]:
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


def execute_plan(plan: Plan, no_dashboard: bool, alerting: Alerting | None) -> Result:
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

    with flag_names(ctx):
        plan = Plan.build(
            kit,
            {"run": engine},
            out,
            dict(overrides),
            overlay or [],
        )
    alerting = start_alerting(metrics_port, metrics_host, on_stall, on_stall_end, on_stall_timeout)
    result = execute_plan(plan, no_dashboard, alerting)
    arm = next(iter(result.report.arms.values())) if result.report is not None else None
    if arm is not None and arm.end_reason == "engine_died":
        raise fail(
            f"the engine died during the run; partial results kept in {plan.out_dir}",
            f"read {plan.out_dir / 'engine.log'}",
            code=EXIT_ENGINE_DIED,
        )


def register(app: typer.Typer) -> None:
    """Add `kit run` to the command line."""
    app.command("run")(run)
