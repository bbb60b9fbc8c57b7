"""An A/B (or one-arm) run directory read into figures: `ABReport`, and `ab.json`.

Over several seeds an arm's directory holds one `seed-N` directory per seed: the report then
sums the counts over seeds (decode tok/s and cache share are means), keeps each seed's row
(seeds whose runs are identical marked as repeats, counted once), each arm's exposure and
stall rate per engine hour with its exact 95 % interval, and the verdict (see
`stallkit.reports.seed_stats`). A seed that ended early is censored with its reason, never counted as
clean; a seed whose files cannot be read is named, never dropped silently. The table's cells
and `ab.md` are `stallkit.reports.ab_markdown`'s.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from stallkit.contract.ab import (
    ABFile,
    ArmFigures,
    ArmReport,
    DamagedSeed,
    PartialRun,
    SeedRow,
    StallRate,
    Verdict,
)
from stallkit.contract.files import KIT_FILE, META_FILE, SEED_DIR_PREFIX, TIMELINE_FILE, TURNS_FILE
from stallkit.contract.kitfile import KitFile
from stallkit.contract.slo import SloConfig, SloSummary, VerdictConfig, slo_figures
from stallkit.reports.errors import DamagedRunError, ReportError
from stallkit.reports.noninferiority import noninferiority_tests, slo_summary
from stallkit.reports.partial_run import partial_run
from stallkit.reports.rundir import (
    arm_figures,
    read_kit,
    read_meta,
    read_turns,
    reading_once,
    seed_dirs,
)
from stallkit.reports.seed_stats import mark_repeats, rate_of, seed_row, verdict

_R = TypeVar("_R", bound=str)


class ABReport(BaseModel):
    """The figures of an A/B directory."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kit: str
    arms: dict[str, ArmFigures]
    #: per arm, one row per seed (one row when the arm ran one seed)
    seeds: dict[str, list[SeedRow]] = {}
    #: base versus fix over the seeds (None without both arms)
    verdict: Verdict | None = None
    #: per arm, stalls per engine hour of exposure over its seeds
    rates: dict[str, StallRate] = {}
    #: seeds left out because a file could not be read (only with `partial`)
    damaged: list[DamagedSeed] = []
    #: per arm, the seed directories its figures were read from (the plots read these only)
    dirs: dict[str, list[Path]] = {}
    #: per arm, its SLO figures over the seeds (empty when the kit sets no SLOs)
    slo: dict[str, SloSummary] = {}
    #: set when the run was cut short before every planned seed finished in every arm
    partial_run: PartialRun | None = None

    @property
    def seed_count(self) -> int:
        """Seeds per arm (the most any arm ran)."""
        return max((len(rows) for rows in self.seeds.values()), default=1)

    @property
    def stem(self) -> str:
        """The report files' name: `ab` for an A/B, `run` for a one-arm run (nothing to compare)."""
        return "ab" if len(self.arms) > 1 else "run"

    @property
    def title(self) -> str:
        """`A/B: KIT, N seeds, CLOCK clock` (`run: ...` for a one-arm run)."""
        return title(self)


#: end reasons from the worst down: a merged arm keeps the worst any seed had
END_ORDER = ("engine_died", "error", "interrupted", "stall_stop", "starting", "duration")


def _worst(values: list[_R], order: tuple[str, ...]) -> _R | None:
    return min(values, key=order.index) if values else None


def merge_seeds(figures: list[ArmFigures]) -> ArmFigures:
    """One arm's figures over its seeds: counts summed, rates averaged, the worst flags kept."""
    if len(figures) == 1:
        return figures[0]

    def total(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return sum(present) if present else None

    def mean(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return round(sum(present) / len(present), 1) if present else None

    first = figures[0]
    logs: dict[str, int] = {}
    for f in figures:
        for name, count in f.log_counts.items():
            logs[name] = logs.get(name, 0) + count
    censored = [f.censored for f in figures if f.censored is not None]
    lags = [f.lag for f in figures if f.lag]
    # the distinct runs (`mark_repeats`' rule): a repeat of an earlier seed's run adds no exposure
    rows = mark_repeats([seed_row(f) for f in figures])
    runs = [f for f, row in zip(figures, rows, strict=True) if row.same_as is None]
    kv = [f.max_kv_perc for f in figures if f.max_kv_perc is not None]
    planned = [f.planned_duration_s for f in figures]
    return first.model_copy(
        update={
            "stalls": [s for f in figures for s in f.stalls],
            "forensics": [b for f in figures for b in f.forensics],
            "stopped_by_monitor": any(f.stopped_by_monitor for f in figures),
            "turns": sum(f.turns for f in figures),
            "errors": sum(f.errors for f in figures),
            "timeouts": sum(f.timeouts for f in figures),
            "aborted": sum(f.aborted for f in figures),
            "max_kv_perc": max(kv) if kv else None,
            "preemptions": total([f.preemptions for f in figures]),
            "log_counts": logs,
            "decode_tok_s": mean([f.decode_tok_s for f in figures]),
            "cached_perc": mean([f.cached_perc for f in figures]),
            "duration_s": round(sum(f.duration_s for f in figures), 1),
            "planned_duration_s": None if None in planned else sum(p or 0.0 for p in planned),
            "end_reason": _worst([f.end_reason for f in figures], END_ORDER),
            "exposure_s": round(sum(f.exposure_s for f in runs), 3),
            "loaded_s": total([f.loaded_s for f in figures]),
            "run_digest": None,
            "censored": _worst(censored, (*END_ORDER, "metrics_down")),
            "seed": None,
            "like_for_like": not lags,
            "lag": f"{len(lags)} of {len(figures)} seeds lagged: {lags[0]}" if lags else None,
        }
    )


def _linked_from(folder: str, figures: ArmFigures) -> ArmFigures:
    """`figures` with its bundles' paths taken from one folder up, through `folder`."""
    links = [b.model_copy(update={"path": f"{folder}/{b.path}"}) for b in figures.forensics]
    return figures.model_copy(update={"forensics": links})


#: the files of one arm's (or one seed's) directory
_RUN_FILES = (META_FILE, KIT_FILE, TIMELINE_FILE, TURNS_FILE)


def _has_run_files(d: Path) -> bool:
    """Whether `d` holds one arm's (or one seed's) files itself."""
    return any((d / name).exists() for name in _RUN_FILES)


def _seed_of(seed_dir: Path) -> int | None:
    number = seed_dir.name.removeprefix(SEED_DIR_PREFIX)
    return int(number) if number.isdigit() else None


def _read_seeds(
    ab_dir: Path, arm_dir: Path, per_seed: list[Path], damaged: list[DamagedSeed]
) -> list[tuple[Path, ArmFigures]]:
    """Each readable seed's figures; each unreadable one is added to `damaged`, named."""
    out = []
    for seed_dir in per_seed:
        try:
            out.append((seed_dir, arm_figures(seed_dir)))
        except (ReportError, OSError, UnicodeDecodeError) as exc:
            problem = exc.message if isinstance(exc, ReportError) else str(exc)
            if isinstance(exc, UnicodeDecodeError):
                problem = f"not UTF-8 (byte {exc.start})"
            file = _damaged_file(seed_dir, problem)
            problem = _problem_text(problem.replace(str(seed_dir / file), file), file)
            where = seed_dir / file
            damaged.append(
                DamagedSeed(
                    arm=arm_dir.name,
                    seed=_seed_of(seed_dir),
                    file=str(where.relative_to(ab_dir)) if where.is_relative_to(ab_dir) else file,
                    problem=problem,
                )
            )
    return out


def _problem_text(problem: str, file: str) -> str:
    """What is wrong with `file`, without its name: `missing`, `line 3: not valid JSON`."""
    if problem.startswith(file):
        problem = problem[len(file) :].lstrip(":")
        head, _, rest = problem.partition(":")
        problem = f"line {head}:{rest}" if head.isdigit() else problem
    return problem.strip().removeprefix("is ").strip()


def _damaged_file(seed_dir: Path, problem: str) -> str:
    """The run file a read error names; else the first that is missing or not UTF-8."""
    for name in _RUN_FILES:
        if str(seed_dir / name) in problem:
            return name
    for name in _RUN_FILES:
        path = seed_dir / name
        if name == META_FILE and not path.exists():
            return name
        try:
            path.read_bytes().decode("utf-8") if path.exists() else None
        except UnicodeDecodeError:
            return name
    return META_FILE


def damage_error(damaged: list[DamagedSeed]) -> DamagedRunError:
    """The refusal to give a verdict over a silently smaller set of seeds."""
    listed = "; ".join(f"{d.file}: {d.problem}" for d in damaged[:3])
    more = f" (and {len(damaged) - 3} more)" if len(damaged) > 3 else ""
    return DamagedRunError(
        f"{len(damaged)} seed(s) could not be read: {listed}{more}",
        "restore or re-run those seeds, or `kit report --partial DIR` reports over the "
        "readable seeds with the damaged ones listed",
    )


@reading_once()  # a seed's turns give its row and its SLO figures
def load_ab(ab_dir: Path, partial: bool = False, damaged_ok: bool | None = None) -> ABReport:
    """Read every arm below an A/B directory (or a single-arm run directory).

    `partial`: report over what the run holds. A seed whose files cannot be read is never
    dropped silently: ReportError names each one, unless `damaged_ok` (default: `partial`),
    when the report covers the readable seeds and lists the damaged ones. A run cut short
    before every planned seed finished gets no verdict (`stallkit.reports.partial_run`),
    unless `partial`, when the verdict covers the seeds recorded.
    """
    damaged_ok = partial if damaged_ok is None else damaged_ok
    if not ab_dir.is_dir():
        raise ReportError(
            f"{ab_dir} is not a directory", "pass a directory written by `kit ab` or `kit run`"
        )
    if not _has_run_files(ab_dir) and not any(
        p.is_dir() and (_has_run_files(p) or seed_dirs(p, every=True)) for p in ab_dir.iterdir()
    ):
        shown = str(ab_dir) if ab_dir.is_absolute() else f"{ab_dir} ({ab_dir.resolve()})"
        raise ReportError(
            f"{shown} holds no run: no kit.json, meta.json or arm directory in it",
            "give a directory written by `kit ab` or `kit run` (./kit-runs/<time>-<kit>/)",
        )
    kit = read_kit(ab_dir)
    objectives, settings = kit_slo(kit)
    if (
        (ab_dir / META_FILE).exists()
        or (ab_dir / TIMELINE_FILE).exists()
        or seed_dirs(ab_dir, every=True)
    ):
        dirs = [ab_dir]  # a one-arm run (over one seed, or several: a corpus case with no fix)
    else:  # an arm without its meta.json is still an arm: named as damaged, never skipped
        dirs = [
            p
            for p in sorted(ab_dir.iterdir())
            if p.is_dir() and (_has_run_files(p) or seed_dirs(p, every=True))
        ]
    if not dirs:
        raise ReportError(f"no arm directories under {ab_dir}", "each arm needs a meta.json")
    arms: dict[str, ArmFigures] = {}
    seeds: dict[str, list[SeedRow]] = {}
    damaged: list[DamagedSeed] = []
    read_from: dict[str, list[Path]] = {}
    reads: dict[str, list[tuple[Path, ArmFigures]]] = {}
    for d in dirs:
        # a one-arm run over several seeds holds its kit.json beside its seeds' directories
        per_seed = seed_dirs(d, every=True) or [d]
        read = _read_seeds(ab_dir, d, per_seed, damaged)
        if not read:
            continue
        figures = [f for _, f in read]
        if len(per_seed) > 1:  # the arm's report links each seed's bundles through its folder
            figures = [_linked_from(s.name, f) for s, f in read]
        name = read_meta(read[0][0]).arm
        arms[name] = merge_seeds(figures)
        seeds[name] = mark_repeats([seed_row(f) for f in figures])
        reads[name] = read
        read_from[name] = [s for s, _ in read]
    if damaged and not damaged_ok:
        raise damage_error(damaged)
    if not arms:
        raise ReportError(f"no readable arm under {ab_dir}", "each arm needs a meta.json")
    if objectives is not None:
        seeds = _with_slo(seeds, reads, objectives)
    cut_short = partial_run(ab_dir, seeds, damaged, verdict_given=partial)
    result = verdict(seeds["base"], seeds["fix"]) if {"base", "fix"} <= set(seeds) else None
    if cut_short is not None and not partial:
        result = None  # no p-value, no yes or no over fewer seeds than were asked for
    if result is not None and settings is not None:
        tests = noninferiority_tests(seeds["base"], seeds["fix"], settings)
        result = result.model_copy(update={"noninferiority": tests})
    rates = {name: rate_of(rows) for name, rows in seeds.items()}
    summaries = {}
    if objectives is not None:
        summaries = {name: slo_summary(rows, objectives) for name, rows in seeds.items()}
    return ABReport(
        kit=kit.name,
        arms=arms,
        seeds=seeds,
        verdict=result,
        rates=rates,
        damaged=damaged,
        dirs=read_from,
        slo=summaries,
        partial_run=cut_short,
    )


def kit_slo(kit: KitFile) -> tuple[SloConfig | None, VerdictConfig | None]:
    """The kit's SLOs and its non-inferiority settings, as the run saved them (None: no SLOs)."""
    if kit.slo is None:
        return None, None
    return kit.slo, VerdictConfig() if kit.verdict is None else kit.verdict


def healthy_until(figures: ArmFigures) -> float:
    """Engine seconds an arm's seed ran before its first stall (its whole run if none)."""
    return figures.stalls[0].start_s if figures.stalls else figures.duration_s


def _with_slo(
    seeds: dict[str, list[SeedRow]],
    reads: dict[str, list[tuple[Path, ArmFigures]]],
    slo: SloConfig,
) -> dict[str, list[SeedRow]]:
    """Each seed's row with its SLO figures, from its turn records over the same window in
    every arm: from the warm-up's end to the first stall or end of any arm in that seed (the
    performance of the time all arms served; the stalls are the stall test's)."""
    ends: dict[int | None, float] = {}
    for read in reads.values():
        for _, figures in read:
            ends[figures.seed] = min(ends.get(figures.seed, math.inf), healthy_until(figures))
    out: dict[str, list[SeedRow]] = {}
    for name, rows in seeds.items():
        out[name] = []
        for row, (seed_dir, figures) in zip(rows, reads[name], strict=True):
            turns = seed_dir / TURNS_FILE
            records = read_turns(turns) if turns.exists() else []
            end = ends[figures.seed]
            found = slo_figures(records, slo, end_s=end, time_scale=figures.time_scale)
            out[name].append(row.model_copy(update={"slo": found}))
    return out


def shown_dirs(report: ABReport) -> list[Path] | None:
    """The directory drawn per arm in the timelines: its first readable seed (None: unknown)."""
    return [dirs[0] for dirs in report.dirs.values() if dirs] or None


def title(report: ABReport) -> str:
    """The report's title: kit, seeds and clock (a run cut short: the seeds that finished)."""
    n = report.seed_count
    clocks = "/".join(sorted({a.clock for a in report.arms.values()}))
    seeds = f"{n} seeds" if n > 1 else "1 seed"
    cut = report.partial_run
    if cut is not None:
        seeds = f"interrupted, {cut.seeds_finished} of {cut.seeds_planned} seeds finished"
    what = "A/B" if len(report.arms) > 1 else "run"
    return f"{what}: {report.kit}, {seeds}, {clocks} clock"


def to_ab_file(report: ABReport) -> ABFile:
    """ab.json's model: each arm's figures with its per-seed rows, and the verdict."""
    arms = {
        name: ArmReport(
            **dict(arm),
            seeds=report.seeds.get(name, []),
            rate=report.rates.get(name),
            slo=report.slo.get(name),
        )
        for name, arm in report.arms.items()
    }
    return ABFile(
        kit=report.kit,
        arms=arms,
        verdict=report.verdict,
        damaged=report.damaged,
        partial=report.partial_run,
    )


def to_json(report: ABReport) -> dict[str, Any]:
    """ab.json as a JSON object (see `to_ab_file`)."""
    return to_ab_file(report).model_dump(mode="json")
