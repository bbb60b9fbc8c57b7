"""Command-line start-up: how long `kit --help` (and a command's own help) takes, side by side.

Each source tree given (default: this one) runs ``kit ARGS`` in a fresh interpreter ``--reps``
times, interleaved so that load on a shared machine falls on all trees alike. A run times the
import of the command line, the parse and the help it prints (not the interpreter's own start)
and counts the project's modules it has imported by then.

    python benchmarks/cli_startup.py [TREE ...] [--reps 9] [--args=--help --args="load --help"]

Compare the columns of one run, never numbers from different runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

PACKAGES = ("contract", "engine", "loadgen", "monitor", "kits", "reports")

_PROBE = f"""
import contextlib, io, sys, time
start = time.perf_counter()
from stallkit.kits.cli import app
with contextlib.redirect_stdout(io.StringIO()):
    try:
        app(args=sys.argv[1:], prog_name="kit")
    except SystemExit:
        pass
took_ms = (time.perf_counter() - start) * 1000
ours = [m for m in sys.modules if m.split(".")[0] in {PACKAGES!r}]
print(f"{{took_ms:.1f}} {{len(ours)}}")
"""


def _once(tree: Path, args: list[str]) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        check=True,
    )
    took_ms, modules = done.stdout.split()
    return float(took_ms), int(modules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="*", type=Path, help="source trees (default: this one)")
    parser.add_argument("--reps", type=int, default=9, help="runs per tree and command")
    parser.add_argument("--args", action="append", help='the kit arguments (default "--help")')
    opts = parser.parse_args()
    trees = [t.resolve() for t in opts.trees] or [Path(__file__).resolve().parents[1]]
    for args in opts.args or ["--help"]:
        runs: dict[Path, list[tuple[float, int]]] = {tree: [] for tree in trees}
        for _ in range(opts.reps):
            for tree in trees:
                runs[tree].append(_once(tree, args.split()))
        base = statistics.median(ms for ms, _ in runs[trees[0]])
        print(f"kit {args}")
        for tree, results in runs.items():
            median = statistics.median(ms for ms, _ in results)
            print(
                f"  {tree.name:<16} median {median:7.1f} ms  min {min(r[0] for r in results):7.1f}"
                f" ms  x{median / base:4.2f}  project modules {results[-1][1]}"
            )


if __name__ == "__main__":
    main()
