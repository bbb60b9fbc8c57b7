"""How fast the simulator runs, on both clocks, with the kit's own agents and detector.

(a) Virtual clock: one arm of the restore-stall kit (12 agents, the kit's sizes) in process,
    agents + engine core + detector on engine time. Prints engine seconds per wall second for
    each policy (base stops at its stall, as the kit says; fix runs the whole duration).
    Goal >= 2000x.
(b) Wall clock: the same arm served over HTTP (`kit run`'s path) at each --time-scale for
    --wall-s wall seconds; prints the engine time it actually covered per wall second and
    whether the report marks it as fallen behind. Goal: keeps up with the kit's 30x.
(c) The README's `kit ab` (no arguments) end to end in a subprocess: its wall time.

    python benchmarks/sim_speed.py [--seed 8] [--repeat 3] [--time-scale 30 --time-scale 300]
                                   [--wall-s 20] [--skip-http] [--skip-ab]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kits.ab import execute
from kits.config import load_kit
from kits.plan import Plan
from kits.vclock import run_virtual_arm
from reports.ab import load_ab


def bench_virtual(seed: int, repeat: int) -> None:
    kit = load_kit("restore-stall", {"load.seed": seed})
    for policy in ("base", "fix"):
        rates = []
        for i in range(repeat):
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                done = run_virtual_arm(kit, policy, f"sim:{policy}", policy, Path(tmp) / str(i))
                wall = time.perf_counter() - start
            rates.append(done.engine_s / wall)
        print(
            f"(a) virtual  sim:{policy} seed {seed}: {done.engine_s:.0f} engine s "
            f"({done.end_reason}), {kit.load.agents} agents: "
            + ", ".join(f"{r:,.0f}x" for r in rates)
            + " engine s per wall s"
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


def bench_readme_ab() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "kits", "ab", "--no-dashboard", "--out", f"{tmp}/ab"],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - start
        verdict = json.loads((Path(tmp) / "ab" / "ab.json").read_text())["verdict"]
    print(f"(c) README `kit ab`: exit {done.returncode}, {wall:.1f} wall s; verdict {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--time-scale", type=float, action="append", default=None)
    parser.add_argument("--wall-s", type=float, default=20.0)
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--skip-ab", action="store_true")
    args = parser.parse_args()
    bench_virtual(args.seed, args.repeat)
    if not args.skip_http:
        for scale in args.time_scale or [30.0]:
            bench_wall(args.seed, scale, args.wall_s)
    if not args.skip_ab:
        bench_readme_ab()


if __name__ == "__main__":
    main()
