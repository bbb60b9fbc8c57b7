"""The JSON Schemas of a run directory's files, so that other tools can read a run.

`run_dir_schemas()` maps each file's name to the JSON Schema of one line (JSONL files) or of
the whole file (JSON files), and that of a corpus case's TOML file. `kit schema` prints them or writes one `NAME.schema.json` per file;
the copies under `docs/schema/` are generated from here and a test keeps them current.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from stallkit.contract.ab import ABFile, RunPlan
from stallkit.contract.corpus import CASE_FILE, CaseFile
from stallkit.contract.files import (
    AB_FILE,
    KIT_FILE,
    META_FILE,
    PLAN_FILE,
    SUMMARY_FILE,
    TIMELINE_FILE,
    TURNS_FILE,
)
from stallkit.contract.fleet import (
    ALERTS_FILE,
    BACKTEST_FILE,
    FLEET_FILE,
    STALLS_FILE,
    AlertFiring,
    BacktestFile,
    BacktestStall,
    fleet_adapter,
)
from stallkit.contract.forensics import MANIFEST_FILE, BundleManifest
from stallkit.contract.kitfile import KitFile
from stallkit.contract.meta import ArmMeta
from stallkit.contract.records import TurnRecord
from stallkit.contract.scheduler_state import SIM_STATE_FILE, SimState
from stallkit.contract.summary import LoadSummary
from stallkit.contract.sweep import (
    HUNT_FILE,
    SWEEP_FILE,
    SWEEP_PLAN_FILE,
    SWEEP_RUNS_FILE,
    HuntFile,
    SweepFile,
    SweepPlan,
    SweepRun,
)
from stallkit.contract.timeline import timeline_adapter

__all__ = ["SCHEMA_SUFFIX", "run_dir_schemas", "schema_file_name", "schema_text"]

SCHEMA_SUFFIX = ".schema.json"
_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _schema(model: type[BaseModel], title: str) -> dict[str, Any]:
    return {"$schema": _DIALECT, **model.model_json_schema(), "title": title}


def run_dir_schemas() -> dict[str, dict[str, Any]]:
    """{file name: JSON Schema}; for a JSONL file the schema is that of one line."""
    timeline = {"$schema": _DIALECT, **timeline_adapter.json_schema(), "title": "TimelineLine"}
    return {
        TURNS_FILE: _schema(TurnRecord, "TurnRecord"),
        TIMELINE_FILE: timeline,
        META_FILE: _schema(ArmMeta, "ArmMeta"),
        SUMMARY_FILE: _schema(LoadSummary, "LoadSummary"),
        KIT_FILE: _schema(KitFile, "KitFile"),
        AB_FILE: _schema(ABFile, "ABFile"),
        PLAN_FILE: _schema(RunPlan, "RunPlan"),
        MANIFEST_FILE: _schema(BundleManifest, "BundleManifest"),
        SIM_STATE_FILE: _schema(SimState, "SimState"),
        FLEET_FILE: {"$schema": _DIALECT, **fleet_adapter.json_schema(), "title": "FleetLine"},
        STALLS_FILE: _schema(BacktestStall, "BacktestStall"),
        BACKTEST_FILE: _schema(BacktestFile, "BacktestFile"),
        ALERTS_FILE: _schema(AlertFiring, "AlertFiring"),
        # a sweep's (and a hunt's) directory
        SWEEP_PLAN_FILE: _schema(SweepPlan, "SweepPlan"),
        SWEEP_RUNS_FILE: _schema(SweepRun, "SweepRun"),
        SWEEP_FILE: _schema(SweepFile, "SweepFile"),
        HUNT_FILE: _schema(HuntFile, "HuntFile"),
        # not a run's: a corpus case's TOML file, as `kit corpus run PATH` reads it
        CASE_FILE: _schema(CaseFile, "CaseFile"),
    }


def schema_file_name(file_name: str) -> str:
    """`turns.jsonl` -> `turns.schema.json`."""
    return file_name.split(".")[0] + SCHEMA_SUFFIX


def schema_text(schema: dict[str, Any]) -> str:
    """A schema as its file's text (stable: sorted keys, indented, one trailing newline)."""
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
