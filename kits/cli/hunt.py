"""`kit hunt`: search a space of kit settings on the virtual clock for a point where an arm
stalls (or the arms disagree), and shrink it.

Thin: the options become `HuntOptions`, `stallkit.kits.hunt.execute` runs the search, and this
prints what was found and where the reproducer is.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stallkit.kits.cli.common import user_errors
from stallkit.kits.cli.sweep import ArmsOpt, KitOpt, RayOpt, WorkersOpt

if TYPE_CHECKING:
    from rich.console import Console

    from stallkit.contract.sweep import HuntFile


@user_errors
def hunt(
    space: Annotated[
        Path,
        typer.Option(
            "--space",
            help="TOML file: [settings] KEY = [values] or {min, max, step} per kit setting; "
            "[seeds] min, max",
        ),
    ],
    kit: KitOpt = "restore-stall",
    arm: Annotated[
        str, typer.Option("--arm", help="The arm that must not stall: one of --arms (fix, base)")
    ] = "fix",
    arms: ArmsOpt = None,
    differ: Annotated[
        bool, typer.Option("--differ", help="Look for a point where the arms disagree")
    ] = False,
    budget: Annotated[int, typer.Option("--budget", min=1, help="Runs the search may spend")] = 500,
    shrink_budget: Annotated[
        int, typer.Option("--shrink-budget", min=0, help="Runs the shrinking may spend")
    ] = 200,
    seed: Annotated[
        int, typer.Option("--seed", help="The search's seed (same seed, same search)")
    ] = 1,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Hunt directory (default ./kit-runs/<time>-<kit>-hunt/)"),
    ] = None,
    ray: RayOpt = None,
    workers: WorkersOpt = None,
) -> None:
    """Search a space of settings for a point where an arm stalls (or the arms disagree).

    Random points first, then points next to near misses (work pending and no token for a
    while, short of the stall rule), reproducible from --seed. A point found is shrunk (each
    setting toward the kit's value, agents and duration toward their smallest, then the
    smallest seed) and written as reproducer.toml with the `kit ab` that replays it and the
    step log of its stall (steps.txt). Otherwise hunt.json says how much of the space was
    covered and that nothing was found.
    """
    import time

    from rich.console import Console

    from stallkit.kits.ab.plan import DEFAULT_RUNS_DIR
    from stallkit.kits.hunt.execute import HuntOptions, execute_hunt
    from stallkit.kits.kit import load_kit

    console = Console()
    if out is None:
        name = load_kit(kit).name
        out = DEFAULT_RUNS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}-hunt"
    opts = HuntOptions(
        kit, space, arm, differ, budget, shrink_budget, seed, out, ray, workers, arms=arms
    )
    content = execute_hunt(opts, console)
    _print_hunt(console, content, out)


def _print_hunt(console: Console, content: HuntFile, out: Path) -> None:
    covered = ", ".join(f"{k} {v}" for k, v in content.values_covered.items())
    console.print(
        f"searched {content.search_runs} runs over {content.points:,} points of "
        f"{content.space_points:,} (values used: {covered})"
    )
    if content.shrunk is None:
        console.print(f"nothing found: no point where {content.looking_for}")
        if content.nearest_miss is not None:
            miss = content.nearest_miss
            console.print(
                f"nearest miss: {miss.quiet_s:.0f} engine s pending without a token at "
                f"{miss.settings}, seed {miss.seed}"
            )
    else:
        console.print(
            f"[bold red]found[/]: {content.looking_for} at {content.shrunk.settings}, seed "
            f"{content.shrunk.seed} (shrunk in {content.shrink_runs} runs)"
        )
        console.print(f"reproduce: {content.command}")
        console.print(f"[dim]step log: {out / 'steps.txt'}[/]")
    console.print(f"[dim]{out / 'hunt.json'}[/]")


def register(app: typer.Typer) -> None:
    """Add `kit hunt` to the command line."""
    app.command("hunt")(hunt)
