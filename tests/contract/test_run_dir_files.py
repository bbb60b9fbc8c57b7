"""Every file a real run writes reads back through the contract's models, unchanged.

Two runs through the real `kit` process: a virtual-clock A/B (one seed, the base arm stalls
and is stopped) and a wall-clock `kit run` of the simulator over HTTP; then the monitor's
forensics collector and on-stall runner write their JSONL files for the base arm's real stall. Each file is validated against its model and dumped back equal; the
reports re-made from the directories agree with the ab.json / run.json the run wrote.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import TypeAdapter

from stallkit.contract.ab import ABFile
from stallkit.contract.jsonl import read_json, read_jsonl
from stallkit.contract.meta import ArmMeta
from stallkit.contract.records import read_records
from stallkit.contract.schema import run_dir_schemas, schema_file_name
from stallkit.contract.summary import LoadSummary, summarize
from stallkit.contract.timeline import (
    SampleLine,
    StallStartedLine,
    StopRequestedLine,
    timeline_adapter,
)
from stallkit.engine.launch.sim import SimLauncher
from stallkit.engine.spec import parse_spec
from stallkit.monitor.detect.events import StallStarted
from stallkit.monitor.on_stall.command import OnStallCommand, OnStallRunner
from stallkit.monitor.on_stall.forensics import EngineTarget, ForensicsCollector
from stallkit.monitor.signals.parse import MetricsSnapshot
from stallkit.reports.rundir import read_timeline
from stallkit.reports.write import write_reports
from tests.contract.run_dirs import validate_run_dir
from tests.support import kit

REPO = Path(__file__).resolve().parents[2]


_kit = kit


@pytest.fixture(scope="module")
def virtual_ab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vab") / "ab"
    # seed 15: the base arm stalls near 500 engine s and is stopped 240 s later
    done = _kit("ab", "--seed", "15", "--seeds", "1", "--duration", "800", "--no-dashboard",
                "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def wall_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wall") / "run"
    done = _kit("run", "--engine", "sim:fix", "--duration", "90", "--time-scale", "30",
                "--agents", "4", "--no-dashboard", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def load_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`kit load` (the agents alone) against a served simulator."""
    root = tmp_path_factory.mktemp("load")
    launcher = SimLauncher(parse_spec("sim:fix"), root / "sim", {}, 50.0)
    launcher.start()
    try:
        launcher.wait_healthy(60)
        out = root / "run"
        done = _kit("load", launcher.url, "--agents", "2", "--max-turns", "1", "--min-context",
                    "1500", "--max-context", "7000", "--out", str(out))  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        yield out
    finally:
        launcher.stop()


@pytest.fixture(scope="module")
def stall_outputs(virtual_ab: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A forensics bundle and an on-stall record, written by the monitor's own writers for the
    base arm's real stall (its timeline lines are the detector's inputs)."""
    out = tmp_path_factory.mktemp("stall")
    lines = read_timeline(virtual_ab / "base")
    started = next(x for x in lines if isinstance(x, StallStartedLine))
    event = StallStarted(started.t, started.onset, started.kind, True, MetricsSnapshot())
    inputs = [
        x for x in lines if x.type in ("sample", "gpu") and started.t - 60 <= x.t <= started.t
    ]
    # nothing listens on port 9: the bundle records that failure and keeps the inputs
    collector = ForensicsCollector(out, "http://127.0.0.1:9", EngineTarget("remote"), window_s=60)
    collector.collect(event, inputs)
    runner = OnStallRunner(OnStallCommand.parse(f"{sys.executable} -c pass"), out, "http://x:1")
    runner.handle(event)
    runner.close()
    return out


def test_a_virtual_ab_directory_reads_back_through_the_models(virtual_ab: Path) -> None:
    seen = validate_run_dir(virtual_ab)
    # two arms, one seed each: per arm meta, summary, kit, turns, timeline; the A/B's kit and
    # ab and plan; the base arm's stall bundle (its manifest, the detector's inputs, the scheduler)
    assert seen == {"ab.json": 1, "kit.json": 3, "plan.json": 1, "meta.json": 2, "summary.json": 2,
                    "timeline.jsonl": 2, "turns.jsonl": 2,
                    "inputs.jsonl": 1, "manifest.json": 1, "sim-state.json": 1}  # fmt: skip
    base = virtual_ab / "base"
    meta = read_json(base / "meta.json", ArmMeta)
    assert (meta.clock, meta.end_reason, meta.stopped_by_monitor) == ("virtual", "stall_stop", True)
    lines = read_timeline(base)
    kinds = {type(line) for line in lines}
    assert {SampleLine, StallStartedLine, StopRequestedLine} <= kinds
    assert all(line.engines is None for line in lines if isinstance(line, SampleLine))


@pytest.mark.wallclock
def test_a_wall_clock_run_of_the_simulator_reads_back_through_the_models(wall_run: Path) -> None:
    seen = validate_run_dir(wall_run)
    assert seen == {"run.json": 1, "kit.json": 1, "plan.json": 1, "meta.json": 1, "summary.json": 1,
                    "timeline.jsonl": 1, "turns.jsonl": 1}  # fmt: skip
    meta = read_json(wall_run / "meta.json", ArmMeta)
    assert (meta.clock, meta.kind, meta.time_scale) == ("wall", "sim", 30.0)
    assert meta.engine_s is not None and meta.engine_s_per_wall_s is not None
    arm = read_json(wall_run / "run.json", ABFile).arms["run"]
    assert (arm.scale_basis, arm.time_scale) == ("measured", meta.engine_s_per_wall_s)


def test_a_load_run_reads_back_through_the_models(load_run: Path) -> None:
    assert validate_run_dir(load_run) == {"summary.json": 1, "turns.jsonl": 1}
    summary = read_json(load_run / "summary.json", LoadSummary)
    assert summary.turns_ok == 2 and summary.time_scale is None
    assert summary == summarize(read_records(load_run))


def test_forensics_inputs_and_on_stall_lines_read_back_through_the_models(
    stall_outputs: Path,
) -> None:
    seen = validate_run_dir(stall_outputs)
    assert seen == {"inputs.jsonl": 1, "manifest.json": 1, "runs.jsonl": 1}, seen
    (bundle,) = (stall_outputs / "forensics").iterdir()
    inputs = read_jsonl(bundle / "inputs.jsonl", timeline_adapter)
    assert inputs and {line.type for line in inputs} == {"sample", "gpu"}
    (run,) = read_jsonl(stall_outputs / "on-stall" / "runs.jsonl", TypeAdapter(dict[str, Any]))
    assert run["exit_code"] == 0 and run["event"] == "start"


@pytest.mark.parametrize("run", ["virtual_ab", "wall_run"])
def test_reports_remade_from_the_files_match_what_the_run_wrote(
    run: str, request: pytest.FixtureRequest
) -> None:
    run_dir: Path = request.getfixturevalue(run)
    name = "ab.json" if (run_dir / "ab.json").exists() else "run.json"
    written = read_json(run_dir / name, ABFile)
    write_reports(run_dir)
    assert read_json(run_dir / name, ABFile) == written


@pytest.mark.parametrize("run", ["virtual_ab", "wall_run", "load_run", "stall_outputs"])
def test_the_published_schemas_accept_every_file(run: str, request: pytest.FixtureRequest) -> None:
    """Another tool, with only docs/schema, reads the run (jsonschema, not our models)."""
    run_dir: Path = request.getfixturevalue(run)
    schemas = {
        name: json.loads((REPO / "docs" / "schema" / schema_file_name(name)).read_text())
        for name in run_dir_schemas()
    }
    schemas["run.json"] = schemas["ab.json"]
    schemas["inputs.jsonl"] = schemas["timeline.jsonl"]
    checked = 0
    for path in (p for p in run_dir.rglob("*") if p.name in schemas):
        validator = jsonschema.Draft202012Validator(schemas[path.name])
        text = path.read_text()
        docs = (
            [json.loads(x) for x in text.splitlines()]
            if path.suffix == ".jsonl"
            else [json.loads(text)]
        )
        for doc in docs:
            validator.validate(doc)
        checked += 1
    assert checked >= 2
