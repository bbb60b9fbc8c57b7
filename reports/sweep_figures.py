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
    RateMap,
    RatePoint,
    RateSeries,
    Setting,
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
    "rate_map",
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
    distinct_runs = {
        key: distinct(mark_repeats(sorted(v, key=lambda r: r.seed))) for key, v in by_cell.items()
    }
    return SweepFile(
        plan=plan,
        runs=len(runs),
        missing=planned - len(runs),
        cells=cells,
        rate_map=rate_map(plan, distinct_runs),
    )


#: an arm keeps up at a rate while it completes (with [slo]: meets the SLOs of) this share
KEEP_UP_PCT = 90.0
#: a rate meets the SLOs while no seed stalls and this share of its requests meets them
SLO_TARGET_PCT = 90.0
#: the axes that set the offered rate (the others make separate series)
_RATE_KEYS = frozenset({"load.rate", "load.rate_end"})


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _point(cell: int, runs: Sequence[SweepRun]) -> RatePoint | None:
    offered = _mean([r.offered_rps for r in runs])
    if offered is None:
        return None
    # with [slo]: over each run's window after the warm-up; else over the whole run
    achieved = [
        r.slo.request_rps if r.slo else r.turns / r.duration_s if r.duration_s else None
        for r in runs
    ]
    lags = [r.lag_p99_s for r in runs if r.lag_p99_s is not None]
    return RatePoint(
        cell=cell,
        offered_rps=round(offered, 6),
        achieved_rps=_mean(achieved),
        goodput_rps=_mean([r.slo.goodput_rps if r.slo else None for r in runs]),
        attainment_pct=_mean([r.slo.attainment_pct if r.slo else None for r in runs]),
        lag_p99_s=max(lags) if lags else None,
        seeds=len(runs),
        stalled_seeds=sum(r.stalled for r in runs),
    )


def _highest(points: Sequence[RatePoint], ok: list[bool]) -> float | None:
    """The highest offered rate up to which every point is ok (None: not the lowest)."""
    best = None
    for point, good in zip(points, ok, strict=True):
        if not good:
            break
        best = point.offered_rps
    return best


def _series(arm: str, fixed: dict[str, Setting], unit: str, points: list[RatePoint]) -> RateSeries:
    points = sorted(points, key=lambda p: p.offered_rps)
    keeps_up = None
    if unit == "requests":
        share = [
            (p.goodput_rps if p.goodput_rps is not None else p.achieved_rps or 0.0) / p.offered_rps
            for p in points
        ]
        keeps_up = _highest(points, [100 * s >= KEEP_UP_PCT for s in share])
    met = [
        not p.stalled_seeds and p.attainment_pct is not None and p.attainment_pct >= SLO_TARGET_PCT
        for p in points
    ]
    stalls = [p.offered_rps for p in points if p.stalled_seeds]
    return RateSeries(
        arm=arm,
        fixed=fixed,
        unit="sessions" if unit == "sessions" else "requests",
        points=points,
        keeps_up_rps=keeps_up,
        stalls_from_rps=min(stalls) if stalls else None,
        slo_max_rps=_highest(points, met)
        if any(p.attainment_pct is not None for p in points)
        else None,
    )


def rate_map(plan: SweepPlan, observed: dict[tuple[int, str], list[SweepRun]]) -> RateMap | None:
    """Per arm (and value of the axes that do not set the rate), each cell's achieved rate,
    goodput and stalls against its offered rate (None: no run had open-loop arrivals)."""
    groups: dict[tuple[str, str], tuple[dict[str, Setting], str, list[RatePoint]]] = {}
    for index, settings in enumerate(plan.cells()):
        fixed = {k: v for k, v in settings.items() if k not in _RATE_KEYS}
        for arm in plan.arms:
            runs = observed.get((index, arm), [])
            point = _point(index, runs)
            if point is None:
                continue
            unit = next((r.arrival_unit for r in runs if r.arrival_unit), "requests")
            key = (arm, repr(sorted(fixed.items())))
            groups.setdefault(key, (fixed, unit, []))[2].append(point)
    if not groups:
        return None
    series = [_series(arm, fixed, unit, pts) for (arm, _), (fixed, unit, pts) in groups.items()]
    return RateMap(keep_up_pct=KEEP_UP_PCT, slo_target_pct=SLO_TARGET_PCT, series=series)


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
