"""sweep.json: a sweep directory's runs grouped per cell and arm, with the A/B statistics.

Reads `sweep-plan.json` and `sweep-runs.jsonl` only. Per cell and arm: the seeds that ran, those
that stalled (by the kind of their first stall), the stall rate per engine hour of exposure
with its exact interval (`stallkit.reports.seed_stats.rate_of`), and per cell the verdict of its first arm
(base) against its last (fix) (`stallkit.reports.seed_stats.verdict`): the same definitions as the A/B
table's, over the seeds the cell ran. A run missing from an interrupted sweep is not counted;
`missing` says how many.
"""

from __future__ import annotations

import shlex
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from stallkit.contract.ab import SeedRow
from stallkit.contract.jsonl import read_json, read_jsonl, write_json
from stallkit.contract.sweep import (
    SWEEP_FILE,
    SWEEP_HTML,
    SWEEP_PLAN_FILE,
    SWEEP_RUNS_FILE,
    SweepCell,
    SweepFile,
    SweepPlan,
    SweepRun,
    cell_kit_file,
)
from stallkit.contract.timeline import SampleLine
from stallkit.reports.rundir import arm_figures, read_timeline
from stallkit.reports.seed_stats import distinct, mark_repeats, rate_of, seed_row, verdict

__all__ = [
    "arm_seed_row",
    "load_sweep",
    "quiet_span_s",
    "read_plan",
    "read_runs",
    "replay_command",
    "sweep_file",
    "write_sweep_reports",
]


def arm_seed_row(arm_dir: Path) -> SeedRow:
    """The per-seed row of one saved arm directory (as the A/B table's per-seed table)."""
    return seed_row(arm_figures(arm_dir))


def quiet_span_s(arm_dir: Path) -> float:
    """The longest span (engine seconds) over which an arm's samples had work pending and no
    token generated: the stall rule's first condition, whether or not it ripened."""
    longest, start = 0.0, None
    for line in read_timeline(arm_dir):
        if not isinstance(line, SampleLine):
            continue
        pending = (line.running or 0) > 0 or (line.waiting or 0) > 0
        if pending and not line.gen_tok_s:
            start = line.t if start is None else start
            longest = max(longest, line.t - start)
        else:
            start = None
    return round(longest, 3)


def read_plan(sweep_dir: Path) -> SweepPlan:
    """sweep-plan.json."""
    return read_json(sweep_dir / SWEEP_PLAN_FILE, SweepPlan)


def read_runs(sweep_dir: Path) -> list[SweepRun]:
    """sweep-runs.jsonl (none when it is not there yet); a later line for the same run wins."""
    runs = read_jsonl(sweep_dir / SWEEP_RUNS_FILE, SweepRun, missing_ok=True)
    return list({(r.cell, r.arm, r.seed): r for r in runs}.values())


def _seeds_flag(seeds: Sequence[int]) -> str:
    ordered = sorted(seeds)
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"  # one seed is A-A: `--seeds N` means N seeds
    return ",".join(map(str, ordered))


def replay_command(sweep_dir: Path, plan: SweepPlan, cell: int, seeds: Sequence[int]) -> str:
    """The `kit ab` that replays one cell: its kit file (the cell's settings) on the arms."""
    specs = list(plan.arms.values())
    kit_file = shlex.quote(str(sweep_dir / cell_kit_file(cell)))
    arms = f"--base {specs[0]} --fix {specs[-1]}"
    return f"kit ab --kit {kit_file} {arms} --seeds {_seeds_flag(seeds or plan.seeds)}"


def sweep_file(sweep_dir: Path) -> SweepFile:
    """sweep.json's content from the plan and the runs recorded so far."""
    plan, runs = read_plan(sweep_dir), read_runs(sweep_dir)
    by_cell: dict[tuple[int, str], list[SweepRun]] = defaultdict(list)
    for run in runs:
        by_cell[(run.cell, run.arm)].append(run)
    arms = list(plan.arms)
    cells: list[SweepCell] = []
    for index, settings in enumerate(plan.cells()):
        # seeds whose runs are identical (a seed-free workload) count once, as in the A/B
        rows = {
            arm: mark_repeats(sorted(by_cell.get((index, arm), []), key=lambda r: r.seed))
            for arm in arms
        }
        both = len(arms) > 1 and all(rows[a] for a in (arms[0], arms[-1]))
        cell_verdict = verdict(rows[arms[0]], rows[arms[-1]]) if both else None
        ran = sorted({r.seed for arm_rows in rows.values() for r in arm_rows})
        replay = replay_command(sweep_dir, plan, index, ran)
        for arm in arms:
            arm_rows = rows[arm]
            observed = distinct(arm_rows)  # the heat map's share and counts, as the rate's
            cells.append(
                SweepCell(
                    cell=index,
                    settings=settings,
                    arm=arm,
                    seeds=[r.seed for r in observed],
                    stalled_seeds=[r.seed for r in observed if r.stalled],
                    kinds=dict(Counter(str(r.kind) for r in observed if r.stalled)),
                    repeated=[r.seed for r in arm_rows if r.same_as is not None],
                    rate=rate_of(arm_rows),
                    verdict=cell_verdict,
                    replay=replay,
                )
            )
    planned = len(plan.cells()) * len(plan.seeds) * len(arms)
    return SweepFile(plan=plan, runs=len(runs), missing=planned - len(runs), cells=cells)


def load_sweep(sweep_dir: Path) -> SweepFile:
    """sweep.json as written (`write_sweep_reports` makes it)."""
    return read_json(sweep_dir / SWEEP_FILE, SweepFile)


def write_sweep_reports(sweep_dir: Path) -> SweepFile:
    """Write sweep.json and sweep.html from the plan and the runs; the file's content."""
    from stallkit.reports.sweep_html import sweep_html

    content = sweep_file(sweep_dir)
    write_json(sweep_dir / SWEEP_FILE, content)
    (sweep_dir / SWEEP_HTML).write_text(sweep_html(content), encoding="utf-8")
    return content
