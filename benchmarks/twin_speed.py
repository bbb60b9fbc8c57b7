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
with SimpleCPUOffloadConnector.
`--profile` prints where one arm's CPU goes (cProfile, top functions by own time and by cumulative time). Beside it, the same arm's `sim:`
counterpart for scale (`--with-sim`).

    python benchmarks/twin_speed.py [--kit restore-stall] [--spec twin:patched:fix]
                                    [--seed 8] [--repeat 3] [--duration S] [--profile] [--with-sim]
                                    [--kv-transfer-config JSON | --with-kv]
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


def _run(args: argparse.Namespace, spec: str, profile: bool, kv: str | None) -> dict[str, float]:
    argv = [sys.executable, __file__, "--child", "--kit", args.kit, "--spec", spec]
    argv += ["--kv-transfer-config", kv] if kv else []
    argv += ["--seed", str(args.seed)] + (
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
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    specs = [(args.spec, args.kv_transfer_config)]
    specs += [(args.spec, OFFLOADING), (args.spec, SIMPLE)] if args.with_kv else []
    specs += [("sim:" + args.spec.rpartition(":")[2], None)] if args.with_sim else []
    for spec, kv in specs:
        runs = [_run(args, spec, False, kv) for _ in range(args.repeat)]
        wall = [r["engine_s"] / r["wall_s"] for r in runs]
        cpu = [r["engine_s"] / r["cpu_s"] for r in runs]
        per_step = [1000 * r["cpu_s"] / max(1.0, r["steps"]) for r in runs]
        with_kv = f" with {kv}" if kv else ""
        print(
            f"{spec}{with_kv} on {args.kit}, seed {args.seed}, {runs[0]['engine_s']:.0f} engine s:"
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


if __name__ == "__main__":
    main()
