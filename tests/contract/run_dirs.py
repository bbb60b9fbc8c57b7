"""Validating a whole run directory against the contract's models (a helper of the tests).

Each file is read with the model its name says and dumped back: the dump must equal the file's
JSON exactly, so a writer that adds, drops or renames a key (or writes a shape of its own)
fails here. Returns which kinds of file were seen, so a test can say what it covered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from stallkit.contract.ab import ABFile, RunPlan
from stallkit.contract.files import (
    AB_FILE,
    FORENSICS_INPUTS_FILE,
    KIT_FILE,
    META_FILE,
    ONSTALL_RUNS_FILE,
    PLAN_FILE,
    RUN_FILE,
    SUMMARY_FILE,
    TIMELINE_FILE,
    TURNS_FILE,
)
from stallkit.contract.forensics import MANIFEST_FILE, BundleManifest
from stallkit.contract.jsonl import read_json, read_jsonl
from stallkit.contract.kitfile import KitFile
from stallkit.contract.meta import ArmMeta
from stallkit.contract.records import TurnRecord
from stallkit.contract.scheduler_state import SIM_STATE_FILE, SimState
from stallkit.contract.summary import LoadSummary
from stallkit.contract.timeline import timeline_adapter

JSON_MODELS: dict[str, type[BaseModel]] = {
    META_FILE: ArmMeta,
    SUMMARY_FILE: LoadSummary,
    KIT_FILE: KitFile,
    AB_FILE: ABFile,
    PLAN_FILE: RunPlan,
    RUN_FILE: ABFile,
    MANIFEST_FILE: BundleManifest,
    SIM_STATE_FILE: SimState,
}
JSONL_MODELS: dict[str, TypeAdapter[Any]] = {
    TURNS_FILE: TypeAdapter(TurnRecord),
    TIMELINE_FILE: timeline_adapter,
    FORENSICS_INPUTS_FILE: timeline_adapter,
    ONSTALL_RUNS_FILE: TypeAdapter(dict[str, Any]),
}


def validate_run_dir(root: Path) -> dict[str, int]:
    """Read every contract file under `root` through its model; {file name: files checked}."""
    seen: dict[str, int] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.name in JSON_MODELS:
            model = read_json(path, JSON_MODELS[path.name])
            assert model.model_dump(mode="json") == json.loads(path.read_text()), path
        elif path.name in JSONL_MODELS:
            adapter = JSONL_MODELS[path.name]
            lines = read_jsonl(path, adapter)
            raw = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            assert len(lines) == len(raw), path
            for line, written in zip(lines, raw, strict=True):
                assert adapter.dump_python(line, mode="json") == written, (path, written)
        else:
            continue
        seen[path.name] = seen.get(path.name, 0) + 1
    return seen
