"""Where the README's `kit ab` (no arguments) spends its time: end to end, then phase by phase.

(a) End to end: `kit ab --no-dashboard --out DIR` in a subprocess, as a user runs it (the
    restore-stall kit, sim:base against sim:fix, 10 seeds on the virtual clock, the seeds in
    worker processes across the cores): wall seconds and CPU seconds over all its processes.
    With --ref DIR (a run directory of the same command made earlier, e.g. by another
    commit) it also says which of ab.md, ab.json, timeline.png and each seed's summary.json,
    timeline.jsonl and turns.jsonl are byte for byte the same as there.
(b) The same work phase by phase, one after another in one fresh process (what `kit ab`
    spreads over its workers runs here serially, so each seed's share is its own): the
    interpreter's start, the command line's imports, the plan, each arm's simulation per seed
    (total and the median seed), the summaries and statistics (`load_ab`), ab.md and
    ab.json, timeline.png (and the SVG of it that ab.html embeds), ab.html with its other
    plots. Each phase: wall and CPU seconds; a phase that imported matplotlib, scipy.stats or
    numpy first says so (the import is part of its time).

Every figure is printed per repetition and as the median and spread over --repeat runs. On a
shared machine compare CPU seconds first; note the load average printed with each run.

With --against DIR (another checkout of the project, e.g. an older commit unpacked by `git
archive`), every repetition runs that tree too, alternately with this one, so that both see the
same machine load; each figure is then printed per tree.

    python benchmarks/ab_speed.py [--repeat 3] [--ref DIR] [--against DIR] [--skip-phases]
                                  [--skip-e2e]
"""

from __future__ import annotations

import argparse
import filecmp
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("matplotlib", "scipy.stats", "numpy")
SEED_FILES = ("summary.json", "timeline.jsonl", "turns.jsonl")

Timing = dict[str, float]


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min)"


def _timed(fn: Callable[[], Any], heavy: list[str] | None = None) -> tuple[Timing, Any]:
    before = {name for name in HEAVY if name in sys.modules}
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    took = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    if heavy is not None:
        heavy += [name for name in HEAVY if name in sys.modules and name not in before]
    return took, value


def _child(out: Path) -> None:
    """The phases in this process; prints {phase: {wall, cpu, imported}} as JSON."""
    phases: dict[str, dict[str, Any]] = {}

    def phase(name: str, fn: Callable[[], Any]) -> Any:
        heavy: list[str] = []
        took, value = _timed(fn, heavy)
        phases[name] = {**took, "imported": heavy}
        return value

    phase("imports: command line", lambda: __import__("stallkit.kits.cli"))
    phase("imports: kit ab's modules", lambda: __import__("stallkit.kits.ab.execute"))
    from stallkit.kits.ab.execute import Plan
    from stallkit.kits.arm.virtual import run_virtual_arm

    specs = {"base": "sim:base", "fix": "sim:fix"}
    plan: Plan = phase(
        "plan (kit, specs, seeds)",
        lambda: Plan.build("restore-stall", specs, out, {}, [], clock="virtual"),
    )
    out.mkdir(parents=True)
    from stallkit.contract.files import KIT_FILE
    from stallkit.contract.jsonl import write_json
    from stallkit.contract.kitfile import KitFile

    write_json(out / KIT_FILE, KitFile.of(plan.kit.model_dump(mode="json")))
    for arm in plan.arms:
        seeds: list[Timing] = []
        for seed in plan.seeds:
            kit = plan.kit_for(seed)
            took, _ = _timed(
                functools.partial(
                    run_virtual_arm, kit, arm.name, arm.spec, plan.seed_dir(arm, seed)
                )
            )
            seeds.append(took)
        phases[f"simulation: {arm.name} ({len(seeds)} seeds)"] = {
            "wall": sum(s["wall"] for s in seeds),
            "cpu": sum(s["cpu"] for s in seeds),
            "seed_wall": statistics.median(s["wall"] for s in seeds),
            "seed_cpu": statistics.median(s["cpu"] for s in seeds),
            "imported": [],
        }
    _report_phases(out, phase)
    print(json.dumps(phases))


def _report_phases(out: Path, phase: Callable[[str, Callable[[], Any]], Any]) -> None:
    """The steps of `stallkit.reports.write_reports`, one phase each."""
    from stallkit.contract.jsonl import write_json
    from stallkit.reports.ab_figures import load_ab, shown_dirs, to_ab_file
    from stallkit.reports.ab_html import to_html
    from stallkit.reports.ab_markdown import to_markdown
    from stallkit.reports.timeline_plot import save_timelines

    report = phase("summaries and statistics (load_ab)", lambda: load_ab(out))
    phase("ab.md", lambda: (out / "ab.md").write_text(to_markdown(report), encoding="utf-8"))
    phase("ab.json", lambda: write_json(out / "ab.json", to_ab_file(report)))
    svg = phase(
        "timeline.png (+ its SVG)",
        lambda: save_timelines(out, out / "timeline.png", report.title, shown_dirs(report)),
    )
    phase(
        "ab.html (its other plots)",
        lambda: (out / "ab.html").write_text(to_html(report, out, svg), encoding="utf-8"),
    )


def _env(tree: Path) -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(tree)}


def _phases(tree: Path) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        # the interpreter's own start: an empty program in a fresh interpreter
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare = time.perf_counter() - start
        argv = [sys.executable, __file__, "--child", f"{tmp}/ab"]
        # this file's child, on the tree's modules
        done = subprocess.run(argv, env=_env(tree), cwd=tree, capture_output=True, text=True)
        if done.returncode:
            sys.exit(done.stderr)
    phases: dict[str, dict[str, Any]] = {"interpreter start": {"wall": bare, "cpu": bare}}
    measured: dict[str, dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
    return phases | measured


def _same(ref: Path, out: Path) -> str:
    names = ["ab.md", "ab.json", "timeline.png", "ab.html"]
    for seed_dir in sorted(p.relative_to(ref) for p in ref.glob("*/seed-*")):
        names += [str(seed_dir / name) for name in SEED_FILES]
    differ = [n for n in names if not filecmp.cmp(ref / n, out / n, shallow=False)]
    return "all the same" if not differ else "differ: " + ", ".join(differ)


def _end_to_end(tree: Path, ref: Path | None) -> tuple[Timing, str]:
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        argv = [sys.executable, "-m", "stallkit", "ab", "--no-dashboard", "--out", f"{tmp}/ab"]
        # `python -m` puts the working directory first on the path
        subprocess.run(argv, env=_env(tree), cwd=tree, capture_output=True, check=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        same = _same(ref, Path(tmp) / "ab") if ref is not None else ""
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"wall": wall, "cpu": cpu}, same


def _spread(values: list[float]) -> str:
    shown = " ".join(f"{v:6.2f}" for v in values)
    median = statistics.median(values)
    return f"{shown}  median {median:6.2f} ({min(values):.2f}-{max(values):.2f})"


def _print(ends: list[Timing], runs: list[dict[str, dict[str, Any]]]) -> None:
    if ends:
        print(
            f"(a) end to end, {os.cpu_count()} cores   wall s: {_spread([e['wall'] for e in ends])}"
        )
        print(f"    over all its processes      CPU s: {_spread([e['cpu'] for e in ends])}")
    if runs:
        print("(b) phase by phase, serially in one process (each: wall s, then CPU s)")
        for name in runs[0]:
            imported = runs[0][name].get("imported")
            note = f"  [first imports {', '.join(imported)}]" if imported else ""
            print(f"    {name}{note}")
            for key in ("wall", "cpu", "seed_wall", "seed_cpu"):
                if key in runs[0][name]:
                    label = {"seed_wall": "one seed wall", "seed_cpu": "one seed CPU"}.get(key, key)
                    print(f"      {label:>13}: {_spread([r[name][key] for r in runs])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ref", type=Path, help="an earlier `kit ab` run directory to compare")
    parser.add_argument("--against", type=Path, help="another checkout, run alternately")
    parser.add_argument("--skip-phases", action="store_true")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return
    trees = [ROOT] + ([args.against.resolve()] if args.against else [])
    ends: dict[Path, list[Timing]] = {tree: [] for tree in trees}
    runs: dict[Path, list[dict[str, dict[str, Any]]]] = {tree: [] for tree in trees}
    for i in range(args.repeat):
        for tree in trees:
            name = f"run {i + 1} [{tree}]"
            if not args.skip_e2e:
                load = _load()
                took, same = _end_to_end(tree, args.ref)
                ends[tree].append(took)
                print(
                    f"{name}: end to end {took['wall']:.2f} wall s, {took['cpu']:.2f} CPU s; {load}"
                )
                if same:
                    print(f"    against {args.ref}: {same}")
            if not args.skip_phases:
                load = _load()
                runs[tree].append(_phases(tree))
                total = sum(p["cpu"] for p in runs[tree][-1].values())
                print(f"{name}: phases, serially, {total:.2f} CPU s in all; {load}", flush=True)
    for tree in trees:
        print(f"== {tree}")
        _print(ends[tree], runs[tree])


if __name__ == "__main__":
    main()
