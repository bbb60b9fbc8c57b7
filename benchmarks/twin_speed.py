"""How fast the twin runs: vLLM's own scheduler on the virtual clock, with the kit's agents.

One arm of a kit (default: restore-stall, 12 agents at 40-100K tokens, its sizes; `twin:` spec
default `twin:patched:fix`, which runs the whole duration) in a fresh process per repetition,
after a short warm-up arm in the same process (vLLM's import and configs excluded, as in
`kit ab`'s workers). Prints engine seconds per wall second and per CPU second
(`time.process_time`, steadier on a shared machine) for every repetition, their median and
spread, and the median's ratio to the goal of 50x, and the CPU per step the twin ran (steps
skipped as a fixed point not counted). `--kv-transfer-config JSON` adds vLLM's flag to the
kit's engine arguments (the twin then runs that KV connector); `--with-kv` runs the spec
without a connector, then with `{"kv_connector":"OffloadingConnector","kv_role":"kv_both"}` and
with SimpleCPUOffloadConnector. `--side-by-side` runs the README kit's arm without a connector
(restore-stall) and with one (restore-stall-twin: its OffloadingConnector and 4096-block host
tier) and prints them in one table, engine seconds per CPU second per seed, their median and
spread, against the goal with a connector (250x). `--seeds 8 9 10` runs each seed once
(fresh processes) instead of `--repeat` runs of `--seed`.
`--profile` prints where one arm's CPU goes (cProfile, top functions by own time and by
cumulative time). Beside it, the same arm's `sim:` counterpart for scale (`--with-sim`).

    python benchmarks/twin_speed.py [--kit restore-stall] [--spec twin:patched:fix]
                                    [--seed 8] [--repeat 3] [--duration S] [--profile] [--with-sim]
                                    [--kv-transfer-config JSON | --with-kv]
    python benchmarks/twin_speed.py --side-by-side --seeds 8 9 10
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL = 50.0
#: engine seconds per CPU second the twin should keep with a KV connector
GOAL_KV = 250.0
#: the README kit without a connector, and the same arm with restore-stall-twin's connector
SIDE_BY_SIDE = (("no connector", "restore-stall"), ("OffloadingConnector", "restore-stall-twin"))
OFFLOADING = '{"kv_connector":"OffloadingConnector","kv_role":"kv_both"}'
SIMPLE = '{"kv_connector":"SimpleCPUOffloadConnector","kv_role":"kv_both"}'
ROOT = Path(__file__).resolve().parents[1]


def _arm(args: argparse.Namespace, seed: int, duration: float | None, out: Path) -> list[float]:
    """Engine seconds of one arm, then the steps it ran (skipped ones not counted)."""
    from stallkit.engine import EngineCore, parse_spec
    from stallkit.kits.arm.virtual import run_virtual_arm
    from stallkit.kits.kit import load_kit

    kit = load_kit(args.kit)
    load = {"seed": seed} | ({"duration_s": duration} if duration else {})
    kit = kit.model_copy(update={"load": kit.load.model_copy(update=load)})
    if args.kv_transfer_config:
        flag = ["--kv-transfer-config", args.kv_transfer_config]
        engine = kit.engine.model_copy(update={"engine_args": [*kit.engine.engine_args, *flag]})
        kit = kit.model_copy(update={"engine": engine})
    steps: list[float] = []

    def count(core: EngineCore, _now: float) -> None:
        steps.append(core.stats.steps - getattr(core, "skipped_steps", 0))

    return [run_virtual_arm(kit, "arm", parse_spec(args.spec), out, at_end=count).engine_s, *steps]


def _child(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _arm(args, args.seed + 1000, 30.0, Path(tmp) / "warm-up")
        wall0, cpu0 = time.perf_counter(), time.process_time()
        profiler = cProfile.Profile() if args.profile else None
        if profiler is not None:
            profiler.enable()
        engine_s, steps = _arm(args, args.seed, args.duration, Path(tmp) / "arm")
        if profiler is not None:
            profiler.disable()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    print(json.dumps({"engine_s": engine_s, "wall_s": wall, "cpu_s": cpu, "steps": steps}))
    if profiler is not None:
        for order in ("tottime", "cumulative"):
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(18)
            print(text.getvalue(), file=sys.stderr)


def _run(
    args: argparse.Namespace,
    spec: str,
    profile: bool,
    kv: str | None,
    kit: str | None = None,
    seed: int | None = None,
) -> dict[str, float]:
    argv = [sys.executable, __file__, "--child", "--kit", kit or args.kit, "--spec", spec]
    argv += ["--kv-transfer-config", kv] if kv else []
    argv += ["--seed", str(args.seed if seed is None else seed)] + (
        ["--duration", str(args.duration)] if args.duration else []
    )
    argv += ["--profile"] if profile else []
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=True)
    if profile:
        print(done.stderr[-12000:])
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _line(name: str, values: list[float]) -> str:
    median = statistics.median(values)
    shown = ", ".join(f"{v:.0f}" for v in values)
    return f"{name}: {shown}; median {median:.0f}x (min {min(values):.0f}, max {max(values):.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kit", default="restore-stall")
    parser.add_argument("--spec", default="twin:patched:fix")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--with-sim", action="store_true")
    parser.add_argument("--kv-transfer-config", default=None)
    parser.add_argument("--with-kv", action="store_true")
    parser.add_argument("--side-by-side", action="store_true")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    if args.side_by_side:
        _side_by_side(args)
        return
    specs = [(args.spec, args.kv_transfer_config)]
    specs += [(args.spec, OFFLOADING), (args.spec, SIMPLE)] if args.with_kv else []
    specs += [("sim:" + args.spec.rpartition(":")[2], None)] if args.with_sim else []
    seeds = args.seeds or [args.seed] * args.repeat
    for spec, kv in specs:
        runs = [_run(args, spec, False, kv, seed=seed) for seed in seeds]
        wall = [r["engine_s"] / r["wall_s"] for r in runs]
        cpu = [r["engine_s"] / r["cpu_s"] for r in runs]
        per_step = [1000 * r["cpu_s"] / max(1.0, r["steps"]) for r in runs]
        with_kv = f" with {kv}" if kv else ""
        shown_seeds = ", ".join(str(seed) for seed in sorted(set(seeds)))
        print(
            f"{spec}{with_kv} on {args.kit}, seed {shown_seeds}, {runs[0]['engine_s']:.0f} engine s:"
        )
        print("  " + _line("engine s per wall s", wall))
        print("  " + _line("engine s per CPU s", cpu))
        shown = ", ".join(f"{v:.3f}" for v in per_step)
        print(f"  CPU ms per step run: {shown}; median {statistics.median(per_step):.3f}")
        if spec.startswith("twin:"):
            print(
                f"  goal {GOAL:.0f}x: median per CPU s is {statistics.median(cpu) / GOAL:.1f}x it"
            )
    if args.profile:
        _run(args, args.spec, True, args.kv_transfer_config)


def _side_by_side(args: argparse.Namespace) -> None:
    """Without and with a connector, seed by seed (fresh processes), in one table."""
    seeds = args.seeds or [args.seed] * args.repeat
    print(f"{args.spec}, engine s per CPU s (engine s per wall s), seeds {seeds}:")
    print("| | " + " | ".join(f"seed {seed}" for seed in seeds) + " | median | spread |")
    print("| --- |" + " --- |" * (len(seeds) + 2))
    medians: dict[str, float] = {}
    for label, kit in SIDE_BY_SIDE:
        runs = [_run(args, args.spec, False, None, kit=kit, seed=seed) for seed in seeds]
        cpu = [r["engine_s"] / r["cpu_s"] for r in runs]
        cells = [
            f"{c:.0f} ({r['engine_s'] / r['wall_s']:.0f}), {r['engine_s']:.0f} s"
            for c, r in zip(cpu, runs, strict=True)
        ]
        medians[label] = statistics.median(cpu)
        spread = f"{min(cpu):.0f}-{max(cpu):.0f}"
        print(f"| {label} ({kit}) | " + " | ".join(cells) + f" | {medians[label]:.0f} | {spread} |")
    with_kv = medians[SIDE_BY_SIDE[1][0]]
    ratio = with_kv / medians[SIDE_BY_SIDE[0][0]]
    print(
        f"with the connector: median {with_kv:.0f} per CPU s, {ratio:.2f} of without; "
        f"goal {GOAL_KV:.0f}: {'met' if with_kv >= GOAL_KV else 'not met'}"
    )


if __name__ == "__main__":
    main()
