"""The names of the files in a run directory, one constant each, for writers and readers alike.

A run directory (`kit run`, or one arm of `kit ab`, or one `seed-N` of an arm over seeds) holds
`meta.json`, `kit.json`, `summary.json`, `turns.jsonl`, `timeline.jsonl` and `engine.log`; an
A/B directory holds one such directory per arm plus its own `kit.json`, its `plan.json` and the
reports (`ab.json`, or `run.json` for one arm). `kit load` writes `turns.jsonl`, `summary.json` and
`load.json`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "AB_FILE",
    "ENGINE_LOG",
    "FORENSICS_DIR",
    "FORENSICS_INPUTS_FILE",
    "KIT_FILE",
    "LOAD_FILE",
    "META_FILE",
    "ONSTALL_RUNS_FILE",
    "PLAN_FILE",
    "RUN_FILE",
    "SEED_DIR_PREFIX",
    "STOP_MARKER",
    "SUMMARY_FILE",
    "TIMELINE_FILE",
    "TURNS_FILE",
    "discard_if_unrecorded",
    "outermost_missing",
    "seed_dir_name",
]

TURNS_FILE = "turns.jsonl"
TIMELINE_FILE = "timeline.jsonl"
META_FILE = "meta.json"
SUMMARY_FILE = "summary.json"
KIT_FILE = "kit.json"
#: what `kit run` / `kit ab` set out to run (arms, seeds), written before the first arm starts
PLAN_FILE = "plan.json"
LOAD_FILE = "load.json"
ENGINE_LOG = "engine.log"
AB_FILE = "ab.json"
#: ab.json's name for a one-arm run (nothing to compare)
RUN_FILE = "run.json"
FORENSICS_DIR = "forensics"
#: in each forensics bundle: the detector's inputs before the onset (timeline lines)
FORENSICS_INPUTS_FILE = "inputs.jsonl"
#: under `on-stall/`: one line per command run
ONSTALL_RUNS_FILE = "runs.jsonl"
#: the line a launcher appends to `engine.log` before it stops the engine: what the engine logs
#: after it (shutdown noise, tracebacks of a killed worker) is our doing, not its failure, and
#: the reports count log lines up to it only
STOP_MARKER = "=== stallkit: engine stop requested ==="

#: files a run writes about itself; anything else in a run directory was recorded
BOOKKEEPING_FILES = frozenset(
    {KIT_FILE, PLAN_FILE, META_FILE, SUMMARY_FILE, LOAD_FILE, "sim-config.toml"}
)


#: an arm run over several seeds holds one directory per seed: `seed-N`
SEED_DIR_PREFIX = "seed-"


def seed_dir_name(seed: int) -> str:
    """The directory of one seed inside an arm's directory, when the arm ran several seeds."""
    return f"{SEED_DIR_PREFIX}{seed}"


def outermost_missing(path: Path) -> Path | None:
    """The outermost directory that making `path` would create (`path` itself or a parent).

    None when `path` is already there: a directory the user made is theirs to keep.
    """
    made = None
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            break
        made = candidate
    return made


def discard_if_unrecorded(run_dir: Path, made: Path | None = None) -> bool:
    """Remove a failed run's directory when it recorded nothing (no turn, sample or log line).

    Only the files the run itself wrote (bookkeeping, or empty ones) are removed, and only when
    nothing else is there; whatever was recorded is kept. `made` (from `outermost_missing`
    before the run) names the parents the run created, such as the default `kit-runs/`: they go
    too while they are empty. Returns whether the run directory is gone.
    """
    if not run_dir.is_dir():
        return False
    files = [p for p in run_dir.rglob("*") if p.is_symlink() or not p.is_dir()]
    if any(p.name not in BOOKKEEPING_FILES and p.lstat().st_size > 0 for p in files):
        return False
    for path in files:
        path.unlink()
    for directory in sorted(run_dir.rglob("*"), reverse=True):
        directory.rmdir()
    run_dir.rmdir()
    if made is not None and made != run_dir and made in run_dir.parents:
        for parent in run_dir.parents:
            try:
                parent.rmdir()  # only while empty: another run's directory keeps it
            except OSError:
                break
            if parent == made:
                break
    return True
