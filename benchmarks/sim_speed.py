"""How fast the simulator runs, on both clocks, with the kit's own agents and detector.

(a) Virtual clock: one arm of the restore-stall kit (12 agents, the kit's sizes) in process,
    agents + engine core + detector on engine time. Prints engine seconds per wall second and
    per CPU second (`time.process_time`, less noisy on a shared machine) for each policy (base
    stops at its stall, as the kit says; fix runs the whole duration): every repetition, their
    median and spread, and the median's ratio to the goal of 2000x. Each repetition runs in a
    fresh process, after a one-second warm-up arm (imports and per-process set-up excluded, as
    in `kit ab`'s worker processes, which run one arm after another). `--against DIR` runs the
    same arms from another checkout of the project (e.g. an older commit, `git worktree add`)
    alternately with this one, side by side.
(b) Wall clock: the same arm served over HTTP (`kit run`'s path) at each --time-scale for
    --wall-s wall seconds; prints the engine time it actually covered per wall second and
    whether the report marks it as fallen behind. Goal: keeps up with the kit's 30x.
(c) The README's `kit ab` (no arguments) end to end in a subprocess: its wall time.

    python benchmarks/sim_speed.py [--seed 8] [--repeat 3] [--time-scale 30 --time-scale 300]
                                   [--wall-s 20] [--skip-http] [--skip-ab] [--against DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stallkit.kits.ab.execute import execute
from stallkit.kits.ab.plan import Plan
from stallkit.reports.ab_figures import load_ab

GOAL = 2000.0
ROOT = Path(__file__).resolve().parents[1]


def _child(policy: str, seed: int) -> None:
    """One virtual arm in this process; prints its engine, wall and CPU seconds as JSON."""
    from stallkit.kits.arm.virtual import run_virtual_arm
    from stallkit.kits.kit import load_kit

    kit = load_kit("restore-stall", {"load.seed": seed})
    with tempfile.TemporaryDirectory() as tmp:
        # a one-second arm first builds what a process builds once (kit ab's worker processes
        # run one arm after another): the timed arm is the steady state
        warm = load_kit("restore-stall", {"load.seed": seed, "load.duration_s": 1})
        run_virtual_arm(warm, policy, f"sim:{policy}", Path(tmp) / "warm-up")
        wall, cpu = time.perf_counter(), time.process_time()
        done = run_virtual_arm(kit, policy, f"sim:{policy}", Path(tmp) / "arm")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(json.dumps({"engine_s": done.engine_s, "end": done.end_reason, "wall": wall, "cpu": cpu}))


def _arm(tree: Path, policy: str, seed: int) -> dict[str, float | str]:
    env = os.environ | {"PYTHONPATH": str(tree)}
    argv = [sys.executable, __file__, "--child", policy, str(seed)]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    return dict(json.loads(out.splitlines()[-1]))


def _spread(rates: list[float]) -> str:
    median = statistics.median(rates)
    return (
        f"median {median:,.0f}x ({min(rates):,.0f}-{max(rates):,.0f}x, "
        f"{median / GOAL:.2f} of the goal)"
    )


def bench_virtual(seed: int, repeat: int, against: Path | None) -> None:
    trees = {"this": ROOT} | ({"against": against} if against else {})
    for policy in ("base", "fix"):
        runs: dict[str, list[dict[str, float | str]]] = {name: [] for name in trees}
        for _ in range(repeat):  # alternate the trees so that both see the same machine load
            for name, tree in trees.items():
                runs[name].append(_arm(tree, policy, seed))
        for name, arms in runs.items():
            engine_s = float(arms[0]["engine_s"])
            wall = [float(a["engine_s"]) / float(a["wall"]) for a in arms]
            cpu = [float(a["engine_s"]) / float(a["cpu"]) for a in arms]
            label = "" if against is None else f" [{name}: {trees[name]}]"
            print(
                f"(a) virtual  sim:{policy} seed {seed}{label}: {engine_s:.0f} engine s "
                f"({arms[0]['end']}), 12 agents, engine s per wall s: "
                + ", ".join(f"{r:,.0f}x" for r in wall)
                + f"; {_spread(wall)}; per CPU s: {_spread(cpu)}"
            )


def bench_wall(seed: int, scale: float, wall_s: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        overrides = {"load.seed": seed, "sim.time_scale": scale, "load.duration_s": wall_s * scale}
        plan = Plan.build("restore-stall", {"run": "sim:fix"}, out, overrides, [], clock="wall")
        execute(plan, dashboard=False)
        meta = json.loads((out / "meta.json").read_text())
        arm = next(iter(load_ab(out).arms.values()))
    achieved = meta.get("engine_s_per_wall_s")
    print(
        f"(b) wall     sim:fix at {scale:g}x for {meta['wall_s']:.1f} wall s: "
        f"{meta.get('engine_s', 0):.0f} engine s = {achieved}x; "
        + ("kept up" if arm.like_for_like else f"marked not like for like ({arm.lag})")
    )


def bench_readme_ab(against: Path | None) -> None:
    trees = {"this": ROOT} | ({"against": against} if against else {})
    for name, tree in trees.items():
        with tempfile.TemporaryDirectory() as tmp:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "stallkit", "ab", "--no-dashboard", "--out", f"{tmp}/ab"],
                env=os.environ | {"PYTHONPATH": str(tree)},
                cwd=tree,  # `python -m` puts the working directory first on the path
                capture_output=True,
                text=True,
                check=False,
            )
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            verdict = json.loads((Path(tmp) / "ab" / "ab.json").read_text())["verdict"]
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        label = "" if against is None else f" [{name}: {tree}]"
        print(
            f"(c) README `kit ab`{label}: exit {done.returncode}, {wall:.1f} wall s "
            f"({cpu:.1f} CPU s over its processes); verdict {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--time-scale", type=float, action="append", default=None)
    parser.add_argument("--wall-s", type=float, default=20.0)
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--skip-ab", action="store_true")
    parser.add_argument("--against", type=Path, default=None, help="another checkout to compare")
    parser.add_argument("--child", nargs=2, metavar=("POLICY", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], int(args.child[1]))
        return
    bench_virtual(args.seed, args.repeat, args.against)
    if not args.skip_http:
        for scale in args.time_scale or [30.0]:
            bench_wall(args.seed, scale, args.wall_s)
    if not args.skip_ab:
        bench_readme_ab(args.against)


if __name__ == "__main__":
    main()
