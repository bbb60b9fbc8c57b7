"""`kit sweep`: a kit's settings x seeds x arms on the virtual clock, mapped.

Thin: parse the flags into a plan validated against the kit (`stallkit.kits.sweep.plan`), run it
(`stallkit.kits.sweep.execute`), print where each arm stalled and the report paths. The flags it
shares with `kit hunt` (kit, arms, Ray, workers) are declared here and imported there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stallkit.kits.cli.common import interrupted, user_errors
from stallkit.kits.cli.fields import NO_OVERRIDES, kit_overrides

if TYPE_CHECKING:
    from rich.console import Console

    from stallkit.contract.sweep import SweepFile, SweepPlan

VaryOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--vary",
        help="A kit setting and its values: KEY=A,B,C or KEY=START:STOP:STEP (both ends "
        "included), e.g. sim.engine.max_num_seqs=2,4,6 or sim.engine.prefill_compute_share="
        "0.2:0.8:0.1. Repeatable: the sweep runs every combination",
    ),
]

KitOpt = Annotated[
    str, typer.Option("--kit", "-k", metavar="KIT", help="Kit name (shipped) or path to a .toml")
]
RayOpt = Annotated[
    str | None,
    typer.Option(
        "--ray", help="Run on an existing Ray cluster: its address, or auto (needs stallkit[ray])"
    ),
]
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        min=1,
        help="Local worker processes (default: one per core this process may run on)",
    ),
]
SeedsOpt = Annotated[
    str,
    typer.Option("--seeds", help="Seeds per cell and arm: N (from the kit's seed), A-B or A,B,C"),
]
ArmsOpt = Annotated[
    str | None,
    typer.Option(
        "--arms",
        help="Arms: sim policies by name (base,fix) or NAME=SPEC,... with sim: or twin: specs "
        "(e.g. base=twin:patched:base,fix=twin:patched:fix); default base,fix. The first is "
        "the verdict's base, the last its fix",
    ),
]


@user_errors
@kit_overrides("load.duration_s")
def sweep(
    ctx: typer.Context,
    kit: KitOpt = "restore-stall",
    vary: VaryOpt = None,
    seeds: SeedsOpt = "10",
    arms: ArmsOpt = None,
    overrides: Mapping[str, Any] = NO_OVERRIDES,
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
    ray: RayOpt = None,
    workers: WorkersOpt = None,
    no_dashboard: Annotated[
        bool, typer.Option("--no-dashboard", help="Plain progress lines instead of the bar")
    ] = False,
) -> None:
    """Run every combination of the --vary settings over seeds and arms on the virtual clock.

    Writes sweep-runs.jsonl (one line per run, appended as each finishes), sweep.json (per cell and
    arm: stalls, exposure, stall rate per engine hour with its exact interval, the cell's
    verdict) and sweep.html (heat maps of where each arm stalls, each cell linked to the
    `kit ab` command that replays it). Ctrl-C keeps every finished run; --resume runs the rest.

    Varying load.rate (e.g. --vary load.rate=0.05,0.1,0.2,0.4) adds the rate map: per arm,
    requests done and goodput against the offered arrival rate, where the arm stops keeping
    up, where it starts stalling and the highest rate meeting the kit's SLOs.
    """
    from rich.console import Console

    from stallkit.kits.ab.plan import DEFAULT_RUNS_DIR, parse_seeds
    from stallkit.kits.cli.common import fail
    from stallkit.kits.kit import load_kit
    from stallkit.kits.sweep.execute import execute_sweep, existing_plan
    from stallkit.kits.sweep.plan import build_plan, idle_axes, parse_arms, parse_vary

    duration = overrides.get("load.duration_s")
    console = Console()
    if resume:
        if out is None:
            raise fail("--resume needs the --out of the sweep to finish", "add --out DIR")
        plan = existing_plan(out)
        if plan is None:
            raise fail(f"{out} holds no sweep to resume", "give the --out of a sweep")
        _same_plan(ctx, plan, out, (kit, vary, seeds, arms, duration))
    else:
        axes = [parse_vary(v) for v in vary or []]
        base = load_kit(kit)
        plan = build_plan(kit, axes, parse_arms(arms), parse_seeds(seeds, base.load.seed), duration)
        for note in idle_axes(plan):
            console.print(f"[yellow]note:[/] {note}")
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
        _print_sweep(console, result.content, out)
    if result.interrupted:
        console.print(f"interrupted: `kit sweep --resume --out {out}` runs the rest")
        raise interrupted()


#: the parameters of the flags that make a sweep's plan
_PLAN_FLAGS = ("kit", "vary", "seeds", "arms", "duration")


def _same_plan(
    ctx: typer.Context,
    saved: SweepPlan,
    out: Path,
    flags: tuple[str, list[str] | None, str, str | None, float | None],
) -> None:
    """Under --resume, the plan flags given (the command line that made the sweep, say) must
    make the plan saved in `out`; a flag left out takes the saved plan's value."""
    from stallkit.kits.ab.plan import parse_seeds
    from stallkit.kits.cli.common import fail
    from stallkit.kits.kit import load_kit
    from stallkit.kits.sweep.plan import build_plan, parse_arms, parse_vary

    given = {
        name
        for name in _PLAN_FLAGS
        if (source := ctx.get_parameter_source(name)) is not None and source.name != "DEFAULT"
    }
    if not given:
        return
    kit, vary, seeds, arms, duration = flags
    kit_ref = kit if "kit" in given else saved.kit
    axes = [parse_vary(v) for v in vary or []] if "vary" in given else saved.axes
    seed_list = parse_seeds(seeds, load_kit(kit_ref).load.seed) if "seeds" in given else saved.seeds
    fixed = saved.fixed.get("load.duration_s")
    asked = duration if "duration" in given else float(fixed) if fixed is not None else None
    arm_map = parse_arms(arms) if "arms" in given else saved.arms
    plan = build_plan(kit_ref, axes, arm_map, seed_list, asked)
    difference = plan_difference(saved, plan)
    if difference is not None:
        raise fail(
            f"--resume: {difference}",
            f"run the command that made the sweep in {out}, or leave out --resume and give a "
            "new --out",
        )


def plan_difference(saved: SweepPlan, given: SweepPlan) -> str | None:
    """The first way `given` (this command line's plan) differs from `saved`, in flags."""
    if saved.kit != given.kit and Path(saved.kit).resolve() != Path(given.kit).resolve():
        return f"--kit {given.kit}, but the sweep ran --kit {saved.kit}"
    saved_axes = {a.key: a.values for a in saved.axes}
    given_axes = {a.key: a.values for a in given.axes}
    for key, values in given_axes.items():
        if key not in saved_axes:
            return f"--vary {key}, which the sweep does not vary"
        if values != saved_axes[key]:
            return f"--vary {key}={_values(values)}, but the sweep ran {key}={_values(saved_axes[key])}"
    for key in saved_axes.keys() - given_axes.keys():
        return f"no --vary {key}, which the sweep varies ({key}={_values(saved_axes[key])})"
    if list(given_axes) != list(saved_axes):
        return (
            f"--vary in another order ({', '.join(given_axes)}; the sweep: {', '.join(saved_axes)})"
        )
    if given.seeds != saved.seeds:
        return f"--seeds {_values(given.seeds)}, but the sweep ran seeds {_values(saved.seeds)}"
    if list(given.arms.items()) != list(saved.arms.items()):  # the first arm is the base
        return f"--arms {_arms(given.arms)}, but the sweep ran --arms {_arms(saved.arms)}"
    if given.duration_s != saved.duration_s:
        return f"--duration {given.duration_s:g}, but the sweep ran {saved.duration_s:g} engine s"
    return None


def _values(values: Sequence[object]) -> str:
    shown = ",".join(str(v) for v in values[:8])
    return shown + (f",... ({len(values)} values)" if len(values) > 8 else "")


def _arms(arms: dict[str, str]) -> str:
    return ",".join(f"{name}={spec}" for name, spec in arms.items())


def _print_sweep(console: Console, content: SweepFile, out: Path) -> None:
    for arm in content.plan.arms:
        cells = [c for c in content.cells if c.arm == arm and c.seeds]
        hit = sum(bool(c.stalled_seeds) for c in cells)
        stalls = sum(len(c.stalled_seeds) for c in cells)
        runs = sum(len(c.seeds) for c in cells)
        console.print(f"{arm}: stalled in {hit} of {len(cells)} cells ({stalls} of {runs} runs)")
    if content.rate_map is not None:  # a load.rate sweep: where each arm keeps up
        from stallkit.reports import rate_summary

        for series in content.rate_map.series:
            where = ", ".join(f"{k} = {v}" for k, v in series.fixed.items())
            line = rate_summary(series, content.rate_map)
            arm = series.arm + (f" ({where})" if where else "")
            console.print(f"{arm} against the rate: {line}", highlight=False)
    console.print(f"[dim]reports: {out / 'sweep.html'}, {out / 'sweep.json'}[/]")


def register(app: typer.Typer) -> None:
    """Add `kit sweep` to the command line."""
    app.command("sweep")(sweep)
