"""`kit sim`: the embedded simulated engine (`serve` is `python -m engine.sim` under the kit;
`trace` explains the livelock step by step)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from kits.cli.common import help_when_bare, user_errors


class PolicyChoice(StrEnum):
    """Scheduler policy of the simulated engine."""

    base = "base"
    fix = "fix"


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
    from engine.sim.trace import run_trace

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


@sim_app.command(
    "serve",
    short_help="Serve the simulated engine like vLLM, over HTTP.",
    # every argument goes to the simulator's own parser, `--help` included
    add_help_option=False,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def serve(ctx: typer.Context) -> None:
    """Serve the simulated engine like vLLM: chat/completions, /tokenize, /metrics, DCGM.

    The same command line as `python -m engine.sim`; `kit sim serve --help` lists its options.
    """
    from engine.sim.__main__ import main

    raise typer.Exit(main(ctx.args, prog="kit sim serve"))


def register(app: typer.Typer) -> None:
    """Add `kit sim` (trace, serve) to the top-level app."""
    app.add_typer(sim_app, name="sim")
