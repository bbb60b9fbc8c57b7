"""`kit sweep`: a kit's settings x seeds x arms on the virtual clock, as heat maps of stalls.

Thin: parse the flags into a plan validated against the kit (`kits.sweep`), run it
(`kits.sweepexec`), print where each arm stalled and the report paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kits.cli.common import user_errors

EXIT_INTERRUPTED = 130

VaryOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--vary",
        help="A kit setting and its values: KEY=A,B,C or KEY=START:STOP:STEP (both ends "
        "included), e.g. sim.engine.max_num_seqs=2,4,6 or sim.engine.prefill_compute_share="
        "0.2:0.8:0.1. Repeatable: the sweep runs every combination",
    ),
]


@user_errors
def sweep(
    kit: Annotated[
        str, typer.Option("--kit", "-k", help="Kit name (shipped) or path to a .toml")
    ] = "restore-stall",
    vary: VaryOpt = None,
    seeds: Annotated[
        str,
        typer.Option(
            "--seeds", help="Seeds per cell and arm: N (from the kit's seed), A-B or A,B,C"
        ),
    ] = "10",
    arms: Annotated[
        str | None,
        typer.Option(
            "--arms",
            help="Arms: sim policies by name (base,fix) or NAME=SPEC,...; default base,fix. "
            "The first is the verdict's base, the last its fix",
        ),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option("--duration", help="Engine seconds per run (default: the kit's)", min=1),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Sweep directory (default ./kit-runs/<time>-<kit>-sweep/)"
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Finish the sweep in --out: run only its missing runs"),
    ] = False,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="Run on an existing Ray cluster: its address, or auto (needs stallkit[ray])",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", min=1, help="Local worker processes (default: one per core)"),
    ] = None,
    no_dashboard: Annotated[
        bool, typer.Option("--no-dashboard", help="Plain progress lines instead of the bar")
    ] = False,
) -> None:
    """Run every combination of the --vary settings over seeds and arms on the virtual clock.

    Writes runs.jsonl (one line per run, appended as each finishes), sweep.json (per cell and
    arm: stalls, exposure, stall rate per engine hour with its exact interval, the cell's
    verdict) and sweep.html (heat maps of where each arm stalls, each cell linked to the
    `kit ab` command that replays it). Ctrl-C keeps every finished run; --resume runs the rest.
    """
    from rich.console import Console

    from kits.cli.common import fail
    from kits.config import load_kit
    from kits.plan import DEFAULT_RUNS_DIR, parse_seeds
    from kits.sweep import build_plan, parse_arms, parse_vary
    from kits.sweepexec import execute_sweep, existing_plan

    console = Console()
    if resume:
        if out is None:
            raise fail("--resume needs the --out of the sweep to finish", "add --out DIR")
        plan = existing_plan(out)
        if plan is None:
            raise fail(f"{out} holds no sweep to resume", "give the --out of a sweep")
        if vary:
            raise fail("--resume runs the plan already in --out", "drop --vary (and --seeds)")
    else:
        axes = [parse_vary(v) for v in vary or []]
        base = load_kit(kit)
        plan = build_plan(kit, axes, parse_arms(arms), parse_seeds(seeds, base.load.seed), duration)
        if out is None:
            import time

            out = DEFAULT_RUNS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-{base.name}-sweep"
    result = execute_sweep(
        plan,
        out,
        resume=resume,
        ray_address=ray,
        workers=workers,
        dashboard=not no_dashboard,
        console=console,
    )
    if result.content is not None:
        content = result.content
        for arm in content.plan.arms:
            cells = [c for c in content.cells if c.arm == arm and c.seeds]
            hit = sum(bool(c.stalled_seeds) for c in cells)
            stalls = sum(len(c.stalled_seeds) for c in cells)
            runs = sum(len(c.seeds) for c in cells)
            console.print(
                f"{arm}: stalled in {hit} of {len(cells)} cells ({stalls} of {runs} runs)"
            )
        console.print(f"[dim]reports: {out / 'sweep.html'}, {out / 'sweep.json'}[/]")
    if result.interrupted:
        console.print(f"interrupted: `kit sweep --resume --out {out}` runs the rest")
        raise typer.Exit(EXIT_INTERRUPTED)


def register(app: typer.Typer) -> None:
    """Add `kit sweep` to the command line."""
    app.command("sweep")(sweep)
