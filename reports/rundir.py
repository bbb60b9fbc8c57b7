"""Read a saved arm directory (meta, resolved kit, turns, timeline, engine log) into figures.

Pure functions over parsed records do the arithmetic; the readers only open files. An HTTP arm's
times are wall seconds in the files; they are multiplied by the arm's measured time scale
(engine seconds its simulator covered per wall second; the nominal one when not measured)
so every figure is in engine seconds. A virtual-clock arm writes engine seconds (scale 1).
A simulator arm that fell behind its clock (measured scale more than `LAG_TOLERANCE` below
nominal, or a lag warning in its log) is marked not like for like, with why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loadgen.records import read_records
from loadgen.summary import summarize
from reports.errors import ReportError
from reports.forensics import BundleLink, read_bundles


class Stall(BaseModel):
    """One stall of an arm, in engine seconds from the start of monitoring."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    start_s: float = Field(description="onset of the zero-rate condition")
    duration_s: float
    kind: str
    stopped_run: bool = Field(description="the monitor stopped the run during this stall")


class ArmFigures(BaseModel):
    """Every figure of the A/B table for one arm."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    spec: str
    stalls: list[Stall]
    stopped_by_monitor: bool
    turns: int
    errors: int
    timeouts: int
    aborted: int
    max_kv_perc: float | None
    preemptions: float | None
    log_counts: dict[str, int]
    decode_tok_s: float | None
    cached_perc: float | None
    duration_s: float
    planned_duration_s: float | None
    end_reason: str
    time_scale: float
    forensics: list[BundleLink] = Field(default_factory=list, description="stall bundles")
    seed: int | None = Field(None, description="the load's seed")
    clock: str = Field("wall", description="virtual (engine clock, in process) or wall (HTTP)")
    like_for_like: bool = Field(True, description="False when the arm fell behind its clock")
    lag: str | None = Field(None, description="why the arm is not like for like, if it lagged")


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a JSONL file, skipping a torn last line from a crash."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                yield obj


def stalls_from_timeline(events: Iterable[Mapping[str, Any]], scale: float) -> list[Stall]:
    """Stalls from detector events; a stall still open at the end lasts until the last event."""
    stalls: list[Stall] = []
    open_stall: dict[str, Any] | None = None
    stop_onsets: set[float] = set()
    last_t = 0.0
    for ev in events:
        last_t = max(last_t, float(ev.get("t", 0.0)))
        kind = ev.get("type")
        if kind == "stall_started":
            open_stall = {"onset": float(ev["onset"]), "kind": str(ev["kind"])}
        elif kind == "stop_requested":
            stop_onsets.add(float(ev["onset"]))
        elif kind == "stall_ended" and open_stall is not None:
            stalls.append(_stall(open_stall, float(ev["duration_s"]), scale, stop_onsets))
            open_stall = None
    if open_stall is not None:
        stalls.append(_stall(open_stall, last_t - open_stall["onset"], scale, stop_onsets))
    return stalls


def _stall(
    info: Mapping[str, Any], duration_wall_s: float, scale: float, stops: set[float]
) -> Stall:
    return Stall(
        start_s=round(info["onset"] * scale, 3),
        duration_s=round(max(0.0, duration_wall_s) * scale, 3),
        kind=info["kind"],
        stopped_run=info["onset"] in stops,
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


#: the line the launcher appends to engine.log before it stops the engine (engine.launcher
#: writes the same text; a test holds the two together): what follows is shutdown noise
STOP_MARKER = "=== stallkit: engine stop requested ==="


def count_log_patterns(log_path: Path, patterns: Mapping[str, str]) -> dict[str, int]:
    """Count lines of the engine log matching each named regular expression.

    Only the lines before the launcher's stop marker count: an engine stopped with requests
    in flight logs errors of its own (vLLM's abort-mode shutdown logs an EngineDeadError
    traceback), and those say that we stopped it, not that it failed.
    """
    compiled = {name: re.compile(rx) for name, rx in patterns.items()}
    counts = dict.fromkeys(compiled, 0)
    if not log_path.exists():
        return counts
    with log_path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.rstrip("\n") == STOP_MARKER:
                break
            for name, rx in compiled.items():
                if rx.search(line):
                    counts[name] += 1
    return counts


def load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(
            f"{path} is missing", "is this a run directory written by `kit run`?"
        ) from None
    except json.JSONDecodeError as exc:
        raise ReportError(
            f"{path} is not valid JSON ({exc.msg})", "was the run interrupted while writing?"
        ) from None
    if not isinstance(data, dict):
        raise ReportError(
            f"{path} does not hold a JSON object", "is this a stallkit run directory?"
        )
    return data


def arm_dirs(run_dir: Path) -> list[Path]:
    """The arm directories of a run: the run itself (`kit run`) or its children (`kit ab`)."""
    if (run_dir / "meta.json").exists():
        return [run_dir]
    return sorted(p for p in run_dir.iterdir() if (p / "meta.json").exists())


def seed_dirs(arm_dir: Path) -> list[Path]:
    """The `seed-N` directories of an arm run over several seeds, by seed."""
    found = [p for p in arm_dir.glob("seed-*") if (p / "meta.json").exists()]
    return sorted(found, key=lambda p: int(p.name.removeprefix("seed-")))


def shown_arm_dirs(run_dir: Path) -> list[Path]:
    """One directory per arm to draw: the arm itself, or its first seed over several seeds."""
    dirs = arm_dirs(run_dir)
    if dirs:
        return dirs
    children = [p for p in sorted(run_dir.iterdir()) if p.is_dir()]
    return [seeds[0] for seeds in (seed_dirs(c) for c in children) if seeds]


def effective_scale(meta: Mapping[str, Any]) -> float:
    """Engine seconds per wall second of an arm: as achieved when measured, else nominal."""
    achieved = meta.get("engine_s_per_wall_s")
    return float(achieved) if achieved else float(meta.get("time_scale", 1.0))


#: A wall-clock simulator arm whose measured scale is this far below nominal fell behind.
LAG_TOLERANCE = 0.03
_LAG_LOG_RE = re.compile(r"behind its clock")


def lag_reason(meta: Mapping[str, Any], log_path: Path) -> str | None:
    """Why a wall-clock simulator arm fell behind its clock, or None when it kept up."""
    if meta.get("kind") != "sim" or meta.get("clock", "wall") != "wall":
        return None
    nominal = float(meta.get("time_scale", 1.0))
    achieved = meta.get("engine_s_per_wall_s")
    if achieved is not None and float(achieved) < nominal * (1.0 - LAG_TOLERANCE):
        return f"ran at {float(achieved):.1f}x of its nominal {nominal:g}x"
    if achieved is None and meta.get("end_reason") not in ("starting", "error"):
        return f"its engine clock could not be read, so its times assume the nominal {nominal:g}x"
    if log_path.exists() and count_log_patterns(log_path, {"lag": _LAG_LOG_RE.pattern})["lag"]:
        return "its simulator fell behind its clock (lag warning in engine.log)"
    return None


def arm_figures(arm_dir: Path) -> ArmFigures:
    """All table figures for one saved arm directory."""
    meta = load_json(arm_dir / "meta.json")
    kit = load_json(arm_dir / "kit.json")
    scale = effective_scale(meta)
    events = list(read_jsonl(arm_dir / "timeline.jsonl"))
    samples = [e for e in events if e.get("type") == "sample"]
    # the records, not summary.json, are the source: they survive a crash that a summary may not
    turns = arm_dir / "turns.jsonl"
    load = summarize(read_records(turns) if turns.exists() else [])
    engine_s = meta.get("engine_s")
    duration_s = float(engine_s) if engine_s else float(meta.get("wall_s", 0.0)) * scale
    lag = lag_reason(meta, arm_dir / "engine.log")
    kv = [float(s["kv_usage"]) for s in samples if s.get("kv_usage") is not None]
    patterns = kit.get("report", {}).get("log_patterns", {})
    stalls = stalls_from_timeline(events, scale)
    return ArmFigures(
        spec=str(meta.get("spec", arm_dir.name)),
        stalls=stalls,
        stopped_by_monitor=bool(meta.get("stopped_by_monitor", False)),
        turns=load.turns_ok,
        errors=load.errors,
        timeouts=load.timeouts,
        aborted=load.aborted,
        max_kv_perc=round(100.0 * max(kv), 1) if kv else None,
        preemptions=counter_increase(s.get("preemptions") for s in samples),
        log_counts=count_log_patterns(arm_dir / "engine.log", patterns),
        decode_tok_s=round(load.generated_tokens / duration_s, 1) if duration_s > 0 else None,
        cached_perc=None if load.cached_prompt_pct is None else round(load.cached_prompt_pct, 1),
        duration_s=round(duration_s, 1),
        planned_duration_s=meta.get("planned_duration_s"),
        end_reason=str(meta.get("end_reason", "unknown")),
        time_scale=scale,
        forensics=read_bundles(arm_dir, scale),
        seed=meta.get("seed", kit.get("load", {}).get("seed")),
        clock=str(meta.get("clock", "wall")),
        like_for_like=lag is None,
        lag=lag,
    )
