"""Read a saved arm directory (meta, resolved kit, turns, timeline, engine log) into figures.

Pure functions over parsed records do the arithmetic; the readers only open files. An HTTP arm's
times are wall seconds in the files; they are multiplied by the arm's measured time scale
(engine seconds its simulator covered per wall second; the nominal one when not measured)
so every figure is in engine seconds. A virtual-clock arm writes engine seconds (scale 1).
A simulator arm that fell behind its clock (measured scale more than `LAG_TOLERANCE` below
nominal, or a lag warning in its log) is marked not like for like, with why.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from stallkit.contract.ab import ArmFigures, Stall
from stallkit.contract.errors import RunFileError
from stallkit.contract.files import (
    ENGINE_LOG,
    KIT_FILE,
    META_FILE,
    SEED_DIR_PREFIX,
    STOP_MARKER,
    TIMELINE_FILE,
    TURNS_FILE,
)
from stallkit.contract.jsonl import read_json, read_jsonl
from stallkit.contract.kitfile import KitFile
from stallkit.contract.meta import ArmMeta
from stallkit.contract.records import TurnRecord, read_records
from stallkit.contract.summary import summarize
from stallkit.contract.time import ScaleBasis, report_scale
from stallkit.contract.timeline import (
    SampleLine,
    StallEndedLine,
    StallStartedLine,
    StopRequestedLine,
    TimelineLine,
    timeline_adapter,
)
from stallkit.reports.errors import ReportError
from stallkit.reports.exposure import loaded_s, observe
from stallkit.reports.forensics_frames import read_bundles

T = TypeVar("T")

__all__ = [
    "LAG_TOLERANCE",
    "ArmFigures",
    "Stall",
    "arm_dirs",
    "arm_figures",
    "count_log_patterns",
    "counter_increase",
    "effective_scale",
    "lag_reason",
    "read_kit",
    "read_meta",
    "read_timeline",
    "read_turns",
    "reading_once",
    "seed_dirs",
    "shown_arm_dirs",
    "stalls_from_timeline",
]


def read_meta(arm_dir: Path) -> ArmMeta:
    """An arm's meta.json (ReportError when missing or bad)."""
    return _report(lambda: read_json(arm_dir / META_FILE, ArmMeta))


def read_kit(run_dir: Path) -> KitFile:
    """A run's (or an arm's) kit.json (ReportError when missing or bad)."""
    return _report(lambda: read_json(run_dir / KIT_FILE, KitFile))


def read_timeline(arm_dir: Path) -> list[TimelineLine]:
    """An arm's timeline lines (none when it has no timeline; a torn last line is skipped)."""
    path = arm_dir / TIMELINE_FILE
    return _report(lambda: _once(path, lambda: read_jsonl(path, timeline_adapter, missing_ok=True)))


def read_turns(turns: Path) -> list[TurnRecord]:
    """The turn records of a turns.jsonl file (`read_records`, parsed once within
    `reading_once`)."""
    return _once(turns, lambda: read_records(turns))


#: within `reading_once`: each file's parsed lines, with the (mtime, size) they were read at
_parsed: ContextVar[dict[Path, tuple[tuple[int, int], list[Any]]] | None] = ContextVar(
    "_parsed", default=None
)


@contextlib.contextmanager
def reading_once() -> Iterator[None]:
    """While open, a run file read for several figures (a seed's turns for its table row, its
    SLO window and the latency plots; a timeline for its figures and its plot) is parsed
    once; a file changed on disk since is parsed again. Closing forgets them all."""
    if _parsed.get() is not None:  # within one already
        yield
        return
    token = _parsed.set({})
    try:
        yield
    finally:
        _parsed.reset(token)


def _once(path: Path, read: Callable[[], list[T]]) -> list[T]:
    parsed = _parsed.get()
    if parsed is None:
        return read()
    try:
        stat = path.stat()
    except OSError:  # missing: the reader says what that means
        return read()
    stamp = (stat.st_mtime_ns, stat.st_size)
    if path in parsed and parsed[path][0] == stamp:
        return list(parsed[path][1])
    lines = read()
    parsed[path] = (stamp, lines)
    return list(lines)


def _report(read: Callable[[], T]) -> T:
    try:
        return read()
    except RunFileError as exc:
        raise ReportError(exc.message, exc.hint) from None


def stalls_from_timeline(events: Iterable[TimelineLine], scale: float) -> list[Stall]:
    """Stalls from detector events; a stall still open at the end lasts until the last event."""
    stalls: list[Stall] = []
    open_stall: StallStartedLine | None = None
    stop_onsets: set[float] = set()
    last_t = 0.0
    for ev in events:
        last_t = max(last_t, ev.t)
        if isinstance(ev, StallStartedLine):
            open_stall = ev
        elif isinstance(ev, StopRequestedLine):
            stop_onsets.add(ev.onset)
        elif isinstance(ev, StallEndedLine) and open_stall is not None:
            stalls.append(_stall(open_stall, ev.duration_s, scale, stop_onsets))
            open_stall = None
    if open_stall is not None:
        stalls.append(_stall(open_stall, last_t - open_stall.onset, scale, stop_onsets))
    return stalls


def _stall(
    started: StallStartedLine, duration_wall_s: float, scale: float, stops: set[float]
) -> Stall:
    return Stall(
        start_s=round(started.onset * scale, 3),
        duration_s=round(max(0.0, duration_wall_s) * scale, 3),
        kind=started.kind,
        stopped_run=started.onset in stops,
        evidence=started.evidence,
    )


def counter_increase(values: Iterable[float | None]) -> float | None:
    """Total increase of a counter over samples; a drop (engine restart) restarts from 0."""
    total = 0.0
    prev: float | None = None
    seen = False
    for value in values:
        if value is None:
            continue
        if prev is not None:
            total += value - prev if value >= prev else value
        prev = value
        seen = True
    return total if seen else None


def count_log_patterns(log_path: Path, patterns: Mapping[str, str]) -> dict[str, int]:
    """Count lines of the engine log matching each named regular expression.

    Only the lines before the launcher's stop marker count: an engine stopped with requests
    in flight logs errors of its own (vLLM's abort-mode shutdown logs an EngineDeadError
    traceback), and those say that we stopped it, not that it failed. An arm with no log (a
    `url:` arm reads none) counts nothing: its log rows say n/a, not a clean 0.
    """
    if not log_path.exists():
        return {}
    compiled = {name: re.compile(rx) for name, rx in patterns.items()}
    counts = dict.fromkeys(compiled, 0)
    with log_path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.rstrip("\n") == STOP_MARKER:
                break
            for name, rx in compiled.items():
                if rx.search(line):
                    counts[name] += 1
    return counts


def arm_dirs(run_dir: Path) -> list[Path]:
    """The arm directories of a run: the run itself (`kit run`) or its children (`kit ab`)."""
    if (run_dir / META_FILE).exists():
        return [run_dir]
    return sorted(p for p in run_dir.iterdir() if (p / META_FILE).exists())


def seed_dirs(arm_dir: Path, every: bool = False) -> list[Path]:
    """The `seed-N` directories of an arm run over several seeds, by seed: those with a
    meta.json, or (`every`) all of them, so that a damaged one can be named."""
    found = [
        p
        for p in arm_dir.glob(f"{SEED_DIR_PREFIX}*")
        if p.is_dir()
        and p.name.removeprefix(SEED_DIR_PREFIX).isdigit()
        and (every or (p / META_FILE).exists())
    ]
    return sorted(found, key=lambda p: int(p.name.removeprefix(SEED_DIR_PREFIX)))


def shown_arm_dirs(run_dir: Path) -> list[Path]:
    """One directory per arm to draw: the arm itself, or its first seed over several seeds."""
    dirs = arm_dirs(run_dir)
    if dirs:
        return dirs
    children = [p for p in sorted(run_dir.iterdir()) if p.is_dir()]
    return [seeds[0] for seeds in (seed_dirs(c) for c in children) if seeds]


def effective_scale(meta: ArmMeta) -> float:
    """Engine seconds per wall second of an arm: as measured when measured, else nominal."""
    return report_scale(meta.time_scale, meta.engine_s_per_wall_s)[0]


def scale_basis(meta: ArmMeta) -> ScaleBasis:
    """Which scale `effective_scale` used for an arm."""
    return report_scale(meta.time_scale, meta.engine_s_per_wall_s)[1]


#: A wall-clock simulator arm whose measured scale is this far below nominal fell behind.
LAG_TOLERANCE = 0.03
_LAG_LOG_RE = re.compile(r"behind its clock")


def lag_reason(meta: ArmMeta, log_path: Path) -> str | None:
    """Why a wall-clock simulator arm fell behind its clock, or None when it kept up."""
    if meta.kind != "sim" or meta.clock != "wall":
        return None
    nominal = meta.time_scale
    achieved = meta.engine_s_per_wall_s
    if achieved is not None and achieved < nominal * (1.0 - LAG_TOLERANCE):
        return f"ran at {achieved:.1f}x of its nominal {nominal:g}x"
    if achieved is None and meta.end_reason not in ("starting", "error"):
        return f"its engine clock could not be read, so its times assume the nominal {nominal:g}x"
    if log_path.exists() and count_log_patterns(log_path, {"lag": _LAG_LOG_RE.pattern})["lag"]:
        return "its simulator fell behind its clock (lag warning in engine.log)"
    return None


def arm_figures(arm_dir: Path) -> ArmFigures:
    """All table figures for one saved arm directory."""
    meta = read_meta(arm_dir)
    kit = read_kit(arm_dir)
    scale = effective_scale(meta)
    events = read_timeline(arm_dir)
    samples = [e for e in events if isinstance(e, SampleLine)]
    # the records, not summary.json, are the source: they survive a crash that a summary may not
    turns = arm_dir / TURNS_FILE
    records = _report(lambda: read_turns(turns)) if turns.exists() else []
    load = summarize(records)
    duration_s = meta.engine_s if meta.engine_s else meta.wall_s * scale
    flights = [(r.t_start, r.t_end) for r in records]
    under_load_s = loaded_s(events, scale, duration_s, flights)
    lag = lag_reason(meta, arm_dir / ENGINE_LOG)
    kv = [s.kv_usage for s in samples if s.kv_usage is not None]
    stalls = stalls_from_timeline(events, scale)
    onset = stalls[0].start_s if stalls else None
    seen = observe(events, scale, duration_s, onset, meta.end_reason, flights)
    return ArmFigures(
        spec=meta.spec,
        capabilities=meta.capabilities,
        stalls=stalls,
        stopped_by_monitor=meta.stopped_by_monitor,
        turns=load.turns_ok,
        errors=load.errors,
        timeouts=load.timeouts,
        aborted=load.aborted,
        max_kv_perc=round(100.0 * max(kv), 1) if kv else None,
        preemptions=counter_increase(s.preemptions for s in samples),
        log_counts=count_log_patterns(arm_dir / ENGINE_LOG, kit.report.log_patterns),
        # a rate over the time under load: an idle tail (a trace that ended) is not served time
        decode_tok_s=round(load.generated_tokens / under_load_s, 1) if under_load_s > 0 else None,
        cached_perc=None if load.cached_prompt_pct is None else round(load.cached_prompt_pct, 1),
        duration_s=round(duration_s, 1),
        planned_duration_s=meta.planned_duration_s,
        end_reason=meta.end_reason,
        time_scale=scale,
        scale_basis=scale_basis(meta),
        forensics=read_bundles(arm_dir, scale),
        seed=meta.seed if meta.seed is not None else kit.load.seed,
        clock=meta.clock,
        like_for_like=lag is None,
        lag=lag,
        exposure_s=seen.exposure_s,
        loaded_s=under_load_s,
        censored=seen.censored,
        run_digest=run_digest(arm_dir / TIMELINE_FILE, records, meta)
        if samples or records
        else None,
    )


def run_digest(timeline: Path, records: Iterable[TurnRecord], meta: ArmMeta) -> str:
    """A digest of what a seed observed: its timeline file, its requests' times, sizes and
    outcomes (not their ids or text), and how and when it ended. Two seeds with the same digest
    ran the same run (a kit whose workload does not depend on the seed, on the virtual clock):
    one observation. A seed that observed nothing (no sample, no request) has none."""
    h = hashlib.sha256(timeline.read_bytes() if timeline.exists() else b"")
    h.update(repr((meta.end_reason, meta.engine_s, meta.clock)).encode())
    for r in records:
        h.update(
            repr((r.t_start, r.t_end, r.outcome, r.prompt_tokens, r.completion_tokens)).encode()
        )
        h.update(repr((r.cached_tokens, r.ttft_s)).encode())
    return h.hexdigest()[:16]
