"""Execute `kit hunt`: the search and the shrinking on the sweep's runner, then the reproducer.

Every run is appended to `sweep-runs.jsonl` as in a sweep (its `cell` numbers the points in the
order they were drawn). When a point is found and shrunk, the reproducer is written: the kit
file of the shrunk point (`reproducer.toml`, its seed as the kit's seed), the `kit ab` command
that replays it, and the step log of its stall (`steps.txt`, as `kit sim trace` prints one):
the arm is run again and, once its run has ended in the stall, its engine is stepped on.
`hunt.json` says what was searched, how much of the space it covered, and what was found.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console

from stallkit.contract.jsonl import JsonlWriter, write_json
from stallkit.contract.sweep import (
    HUNT_FILE,
    SWEEP_RUNS_FILE,
    HuntFile,
    HuntPoint,
    SweepPlan,
    SweepRun,
)
from stallkit.engine import EngineError, EngineSpec
from stallkit.kits.arm.kinds import arm_specs, check_arm_kinds, kind_of
from stallkit.kits.errors import KitError
from stallkit.kits.hunt.plan import Point, Search, Space, ab_pair, hunt_arms, load_space, shrink
from stallkit.kits.kit import load_kit
from stallkit.kits.sweep.plan import Job, check_values, parse_arms
from stallkit.kits.sweep.runners import (
    check_ray_arms,
    cores,
    kit_of,
    local_pools,
    ray_session,
    run_local,
    run_ray,
)

__all__ = ["HuntOptions", "execute_hunt"]

REPRODUCER = "reproducer.toml"
STEPS_LOG = "steps.txt"
#: steps logged once the reproducer's run has ended in its stall
LOGGED_STEPS = 16


@dataclass(frozen=True)
class HuntOptions:
    """What `kit hunt` was asked to do."""

    kit: str
    space: Path
    arm: str
    differ: bool
    budget: int
    shrink_budget: int
    seed: int
    out: Path
    ray: str | None = None
    workers: int | None = None
    arms: str | None = None  # --arms, as `kit sweep` takes it (default: base and fix on sim)


def _dotted(data: dict[str, Any], key: str) -> object:
    node: object = data
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _valid(
    kit_data: dict[str, Any], space: Space, point: Point, arms: dict[str, EngineSpec]
) -> bool:
    """Whether the point's kit validates, and every twin arm's settings build there."""
    try:
        kit = kit_of(kit_data, space.settings(point))
        for name, spec in arms.items():
            kind_of(spec).core_settings(kit, spec, name)
    except (ValidationError, EngineError):
        return False
    return True


def _hunt_point(space: Space, point: Point, runs: list[SweepRun]) -> HuntPoint:
    return HuntPoint(
        settings=space.settings(point),
        seed=point.seed,
        stalled={r.arm: r.stalled for r in runs},
        quiet_s=max(r.quiet_s for r in runs),
    )


class _Runner:
    """Runs points on every arm (local processes or Ray); appends each run; counts them."""

    def __init__(
        self,
        opts: HuntOptions,
        kit_data: dict[str, Any],
        plan: SweepPlan,
        specs: dict[str, EngineSpec],
        console: Console,
    ) -> None:
        self.opts, self.kit_data, self.plan, self.console = opts, kit_data, plan, console
        self.specs = specs  # the plan's arms as their runs get them
        self.runs, self.stalls, self.start = 0, 0, time.monotonic()
        self.shrinking, self.shrink_from = False, 0
        self.space_axes = plan.axes
        self.drawn: dict[Point, int] = {}
        self.results: dict[Point, list[SweepRun]] = {}
        self.writer = JsonlWriter(opts.out / SWEEP_RUNS_FILE)
        # kept for the whole hunt: a twin's worker imports vLLM once, not once per batch
        self.pools = local_pools(kit_data, specs, opts.workers or cores())

    def evaluate(self, space: Space, points: list[Point]) -> list[list[SweepRun]]:
        todo = [p for p in dict.fromkeys(points) if p not in self.results]
        jobs = []
        for p in todo:
            cell = self.drawn.setdefault(p, len(self.drawn))
            for arm, spec in self.specs.items():
                jobs.append(Job(cell, space.settings(p), arm, spec, p.seed))
        got: dict[int, list[SweepRun]] = defaultdict(list)

        def on_run(run: SweepRun) -> None:
            self.writer.write(run)
            got[run.cell].append(run)

        if self.opts.ray:
            run_ray(self.kit_data, self.plan, jobs, on_run, self.opts.ray)
        else:
            run_local(self.kit_data, self.plan, jobs, on_run, self.pools)
        for p in todo:
            self.results[p] = sorted(got[self.drawn[p]], key=lambda r: r.arm)
        self._progress([r for p in todo for r in self.results[p]])
        return [self.results[p] for p in points]

    def _progress(self, runs: list[SweepRun]) -> None:
        self.runs += len(runs)
        self.stalls += sum(r.stalled for r in runs)
        longest = max(
            (r.quiet_s for p in self.results.values() for r in p if not r.stalled), default=0.0
        )
        rate = self.runs / max(time.monotonic() - self.start, 1e-9)
        if self.shrinking:
            self.console.print(f"shrink: {self.runs - self.shrink_from} runs")
            return
        self.console.print(
            f"hunt: {self.runs}/{self.opts.budget} runs ({rate:.1f}/s), {self.stalls} stalled, "
            f"longest quiet span without a stall {longest:.0f} engine s"
        )


def _step_log(kit_data: dict[str, Any], point: HuntPoint, arm: str, spec: EngineSpec) -> str:
    """The stalled arm's steps once its run has ended in the stall, as a table."""
    from stallkit.engine import SimEngine, trace_steps
    from stallkit.kits.arm.virtual import run_virtual_arm

    if not kind_of(spec).step_log:  # vLLM's scheduler keeps no history of steps
        return (
            f"{arm} ({spec.raw}): no step log for twin arms; the reproducer's `kit ab` keeps "
            "the scheduler's state at the stall in each stalled seed's forensics/\n"
        )
    kit = kit_of(kit_data, {**point.settings, "load.seed": point.seed})
    lines: list[str] = []

    def at_end(core: object, now_s: float) -> None:
        if isinstance(core, SimEngine):
            head = ["step", "turn", "tok", "pre", "rst", "KV", "run", "wait", "def", "dur_ms"]
            lines.append(f"{arm} at engine time {now_s:.1f} s, the run having ended:")
            lines.append(" ".join(f"{h:>6}" for h in head))
            for s in trace_steps(core, now_s, LOGGED_STEPS):
                row = [s.step, s.turn, s.scheduled_tokens, s.preemptions, s.restores_polled]
                row += [f"{s.kv_usage:.2f}", f"{s.running}/{s.slots}", s.waiting, s.deferred]
                row += [f"{1000 * s.duration_s:.0f}"]
                lines.append(" ".join(f"{v!s:>6}" for v in row))

    with tempfile.TemporaryDirectory(prefix="stallkit-hunt-") as scratch:
        run_virtual_arm(kit, arm, spec, Path(scratch) / arm, at_end=at_end)
    return "\n".join(lines) + "\n"


def _reproduce(
    opts: HuntOptions, kit_data: dict[str, Any], point: HuntPoint, specs: dict[str, EngineSpec]
) -> tuple[str, str]:
    """Write the reproducer's kit file and step log; (its path, the `kit ab` command)."""
    from stallkit.engine import dump_toml

    kit = kit_of(kit_data, {**point.settings, "load.seed": point.seed})
    path = opts.out / REPRODUCER
    where = ", ".join(f"{k} = {v}" for k, v in point.settings.items())
    header = f"# kit hunt's reproducer: {where}, seed {point.seed}\n"
    path.write_text(header + dump_toml(kit.model_dump(mode="json", exclude_none=True)))
    base, fix = ab_pair(parse_arms(opts.arms), point.stalled)
    command = f"kit ab --kit {path} --base {base} --fix {fix} --seeds {point.seed}-{point.seed}"
    stalled = next((a for a, s in point.stalled.items() if s), next(iter(point.stalled)))
    (opts.out / STEPS_LOG).write_text(_step_log(kit_data, point, stalled, specs[stalled]))
    return str(path), command


@contextlib.contextmanager
def _session(opts: HuntOptions) -> Iterator[None]:
    if opts.ray is None:
        yield
        return
    with ray_session(opts.ray):
        yield


def execute_hunt(opts: HuntOptions, console: Console) -> HuntFile:
    """Search, shrink what is found, write the reproducer and hunt.json.

    With `--ray` the cluster is reached first (one session for every batch): a cluster that
    is not there is an error before anything is written.
    """
    with _session(opts):
        return _hunt(opts, console)


def _hunt(opts: HuntOptions, console: Console) -> HuntFile:
    if (opts.out / HUNT_FILE).exists():
        raise KitError(f"{opts.out} already holds a hunt", "choose another --out")
    kit = load_kit(opts.kit)
    kit_data = kit.model_dump(mode="json")
    space = load_space(opts.space, lambda key: _dotted(kit_data, key))
    check_values(opts.kit, list(space.axes), {})
    specs = hunt_arms(kit, opts.arms, opts.arm, opts.differ)
    # the kit's per-arm settings name any of --arms, hunted or not
    check_arm_kinds(kit, arm_specs(kit, parse_arms(opts.arms)))
    if opts.ray:
        check_ray_arms(kit, specs)
    plan = SweepPlan(
        kit=opts.kit,
        kit_name=kit.name,
        axes=list(space.axes),
        arms={name: spec.raw for name, spec in specs.items()},
        seeds=[],
        duration_s=float(kit.load.duration_s or 0),
    )
    opts.out.mkdir(parents=True, exist_ok=True)
    runner = _Runner(opts, kit_data, plan, specs, console)

    def found(runs: list[SweepRun]) -> bool:
        if opts.differ:
            return len({r.stalled for r in runs}) > 1
        return any(r.stalled for r in runs)

    looking = f"{' and '.join(specs)} disagree" if opts.differ else f"{opts.arm} stalls"
    console.print(
        f"hunt on {kit.name}: looking for a point where {looking}; {len(space.axes)} settings, "
        f"{space.size():,} points; budget {opts.budget} runs; seed {opts.seed}; out: {opts.out}"
    )
    batch = 32 if opts.ray else 4 * (opts.workers or cores())
    search = Search(
        space,
        lambda points: runner.evaluate(space, points),
        found,
        len(specs),
        random.Random(opts.seed),
        batch=batch,
        valid=lambda point: _valid(kit_data, space, point, specs),
    )
    with runner.writer, runner.pools:
        hit = search.run(opts.budget)
        shrunk, shrink_runs = None, 0
        if hit is not None:
            console.print(f"found after {search.runs} runs: {space.settings(hit)}, seed {hit.seed}")
            runner.shrinking, runner.shrink_from = True, runner.runs
            shrunk, shrink_runs = shrink(
                space,
                hit,
                lambda p: found(runner.evaluate(space, [p])[0]),
                opts.shrink_budget,
                smallest_seeds=16,
            )
    return _write(opts, kit_data, space, search, runner, hit, shrunk, shrink_runs, looking)


def _write(
    opts: HuntOptions,
    kit_data: dict[str, Any],
    space: Space,
    search: Search,
    runner: _Runner,
    hit: Point | None,
    shrunk: Point | None,
    shrink_runs: int,
    looking: str,
) -> HuntFile:
    results = runner.results
    tried = list(search.seen)
    covered = {
        axis.key: f"{len({p.index[d] for p in tried})} of {len(axis.values)}"
        for d, axis in enumerate(space.axes)
    }
    near = None
    if hit is None and search.near:
        best = search.near[0][1]
        near = _hunt_point(space, best, results[best])
    found = _hunt_point(space, hit, results[hit]) if hit is not None else None
    small = _hunt_point(space, shrunk, results[shrunk]) if shrunk is not None else None
    reproducer = command = None
    if small is not None:
        reproducer, command = _reproduce(opts, kit_data, small, runner.specs)
    content = HuntFile(
        kit=opts.kit,
        arms=runner.plan.arms,
        looking_for=looking,
        seed=opts.seed,
        budget=opts.budget,
        search_runs=search.runs,
        points=len(tried),
        space_points=space.size(),
        values_covered=covered,
        nearest_miss=near,
        found=found,
        shrunk=small,
        shrink_runs=shrink_runs,
        reproducer=reproducer,
        command=command,
    )
    write_json(opts.out / HUNT_FILE, content)
    return content
