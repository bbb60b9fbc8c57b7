"""The names of the files in a run directory, one constant each, for writers and readers alike.

A run directory (`kit run`, or one arm of `kit ab`, or one `seed-N` of an arm over seeds) holds
`meta.json`, `kit.json`, `summary.json`, `turns.jsonl`, `timeline.jsonl` and `engine.log`; an
A/B directory holds one such directory per arm plus its own `kit.json` and the reports
(`ab.json`, or `run.json` for one arm). `kit load` writes `turns.jsonl`, `summary.json` and
`load.json`.
"""

from __future__ import annotations

__all__ = [
    "AB_FILE",
    "ENGINE_LOG",
    "FORENSICS_DIR",
    "FORENSICS_INPUTS_FILE",
    "KIT_FILE",
    "LOAD_FILE",
    "META_FILE",
    "ONSTALL_RUNS_FILE",
    "RUN_FILE",
    "SUMMARY_FILE",
    "TIMELINE_FILE",
    "TURNS_FILE",
]

TURNS_FILE = "turns.jsonl"
TIMELINE_FILE = "timeline.jsonl"
META_FILE = "meta.json"
SUMMARY_FILE = "summary.json"
KIT_FILE = "kit.json"
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
