"""`kit sim`: the embedded simulated engine (`serve` is `python -m stallkit.engine.serve` in the kit's
command line: the same flags, declared from `stallkit.engine.serve.options`; `trace` explains the livelock
step by step)."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from stallkit.engine.serve.options import CONFIG_HELP, FAULT_HELP, ServeOptions, policy_help
from stallkit.kits.cli.common import fail, help_when_bare, user_errors
from stallkit.kits.cli.fields import field_option, flags_by_field


class PolicyChoice(StrEnum):
    """Scheduler policy of the simulated engine."""

    base = "base"
    fix = "fix"


class LogLevelChoice(StrEnum):
    """Level of the served engine's log lines."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class CaseChoice(StrEnum):
    """Where the regression scenario's restores wait."""

    full_slots = "full-slots"
    free_slot = "free-slot"


sim_app = typer.Typer(
    help="The embedded simulated engine: serve it like vLLM, or trace its scheduler.",
    invoke_without_command=True,
    callback=help_when_bare,
)


@sim_app.command(short_help="Print the fork's regression scenario step by step.")
@user_errors
def trace(
    policy: Annotated[PolicyChoice, typer.Option(help="Scheduler policy: base (the fork) or fix.")],
    case: Annotated[
        CaseChoice,
        typer.Option(
            help="full-slots: restores wait behind full running slots; "
            "free-slot: a slot is free but the KV pool is not."
        ),
    ] = CaseChoice.full_slots,
    steps: Annotated[int, typer.Option(min=1, max=100_000, help="Steps to run.")] = 12,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per line per step.")
    ] = False,
) -> None:
    """Run the fork's regression scenario and print one line per scheduler step.

    Compute share 0.4, two decodes that fill the KV pool, two restores waiting. Under base,
    from the fourth step on every step schedules nothing (a prefill turn that records no time
    is chosen again forever); under fix, a decode preempts the other and keeps going.
    """
    from stallkit.engine.sim.trace import run_trace

    rows = run_trace(policy.value, case.value, steps)
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row.to_json()))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"sim trace: policy {policy.value}, case {case.value}",
        caption="tok: tokens scheduled; pre: preemptions; rst: restores polled; "
        "vrt: virtual runtime (ms); run: running requests / slots; "
        "wait (def): waiting (deferred restores)",
    )
    for name in ("step", "turn", "tok", "pre", "rst", "KV", "vrt P", "vrt D", "run", "wait (def)"):
        table.add_column(name, justify="left" if name == "turn" else "right", no_wrap=True)
    for row in rows:
        table.add_row(
            str(row.step),
            row.turn,
            str(row.scheduled_tokens),
            str(row.preemptions),
            str(row.restores_polled),
            f"{row.kv_usage:.0%}",
            f"{row.vruntime_prefill * 1000:.1f}",
            f"{row.vruntime_decode * 1000:.1f}",
            f"{row.running}/{row.slots}",
            f"{row.waiting} ({row.deferred})",
        )
    Console().print(table)


@sim_app.command("serve", short_help="Serve the simulated engine like vLLM, over HTTP.")
@user_errors
def serve(
    ctx: typer.Context,
    policy: Annotated[PolicyChoice | None, typer.Option(help=policy_help())] = None,
    host: str = field_option(ServeOptions, "host"),
    port: int = field_option(ServeOptions, "port"),
    time_scale: float = field_option(ServeOptions, "time_scale", "--time-scale"),
    config: Annotated[Path | None, typer.Option(metavar="FILE", help=CONFIG_HELP)] = None,
    freeze_at: float | None = field_option(
        ServeOptions, "freeze_at_s", "--freeze-at", note="(fault injection)"
    ),
    fail_metrics_at: float | None = field_option(
        ServeOptions, "fail_metrics_at_s", "--fail-metrics-at", note="(fault injection)"
    ),
    fault: Annotated[str | None, typer.Option(metavar="KIND@S", help=FAULT_HELP)] = None,
    log_level: LogLevelChoice = field_option(ServeOptions, "log_level"),
    core: str = field_option(ServeOptions, "core", metavar="SPEC"),
    calibration: str = field_option(
        ServeOptions, "calibration", note="(twin cores)", metavar="NAME|FILE"
    ),
    kv_transfer_config: str | None = field_option(
        ServeOptions, "kv_transfer_config", "--kv-transfer-config", metavar="JSON"
    ),
    dialect: str = field_option(ServeOptions, "dialect", metavar="NAME"),
) -> None:
    """Serve the simulated engine like vLLM: chat/completions, /tokenize, /metrics, DCGM.

    Prints `stallkit-sim listening on URL` once it listens, and serves until Ctrl-C. The same
    command as `python -m stallkit.engine.serve`, the engine's own entry point.
    """
    from pydantic import ValidationError

    from stallkit.contract.errors import validation_message
    from stallkit.engine.serve.__main__ import run, serve_options

    try:
        opts = serve_options(
            config,
            None if policy is None else policy.value,
            fault,
            host=host,
            port=port,
            time_scale=time_scale,
            freeze_at_s=freeze_at,
            fail_metrics_at_s=fail_metrics_at,
            log_level=LogLevelChoice(log_level).value,
            core=core,
            calibration=calibration,
            kv_transfer_config=kv_transfer_config,
            dialect=dialect,
        )
    except ValidationError as exc:
        message = validation_message(exc, names=flags_by_field(ctx, ServeOptions))
        raise fail(f"invalid option {message}", "see `kit sim serve --help`") from None
    raise typer.Exit(run(opts))


def register(app: typer.Typer) -> None:
    """Add `kit sim` (trace, serve) to the top-level app."""
    app.add_typer(sim_app, name="sim")
