"""Simulator arms on the virtual clock: agents, engine core and detector on engine time.

The restore-stall kit's sizes, shortened where the point allows; each arm takes a second or
two of CPU. Determinism is checked with the CPU deliberately busy on the second run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from stallkit.contract.forensics import BundleManifest
from stallkit.contract.jsonl import read_json
from stallkit.engine import parse_spec
from stallkit.engine.serve.app import build_app
from stallkit.engine.serve.driver import EngineDriver
from stallkit.engine.sim.config import SimConfig
from stallkit.kits.ab.execute import execute
from stallkit.kits.ab.plan import Plan
from stallkit.kits.arm.virtual import run_virtual_arm, snapshot_of
from stallkit.kits.kit import load_kit
from stallkit.loadgen.records import read_records
from stallkit.monitor.signals.parse import parse_metrics

SEED = 8  # the kit's seed: base livelocks at about 900 engine s


def _events(arm_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (arm_dir / "timeline.jsonl").read_text().splitlines()]


def _turns(arm_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (arm_dir / "turns.jsonl").read_text().splitlines()]


async def test_virtual_sample_equals_the_http_fronts_metrics() -> None:
    driver = EngineDriver(SimConfig(policy="base", num_blocks=40), time_scale=1.0)
    engine = driver.engine
    for i in range(6):
        engine.add_request(f"r{i}", [f"x{i}-{k}" for k in range(3000 + 500 * i)], 50, 0.0)
    now = 0.0
    for _ in range(40):
        now += engine.step(now).duration_s
    engine.abort("r5", now)
    stats = engine.stats
    assert stats.num_running > 0 and stats.num_waiting > 0 and stats.generation_tokens > 0
    transport = httpx.ASGITransport(app=build_app(driver))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        page = (await client.get("/metrics")).text
    parsed = parse_metrics(page)
    # the HTTP front states its clock for the wall-clock monitor; the virtual driver gives the
    # detector engine time itself, so its sample carries no clock
    assert parsed.sim_clock is not None and parsed.sim_clock.scale == 1.0
    assert snapshot_of(engine.stats) == dataclasses.replace(parsed, sim_clock=None)


def test_fix_arm_runs_its_duration_without_a_stall(tmp_path: Path) -> None:
    kit = load_kit("restore-stall", {"load.seed": SEED, "load.duration_s": 1800})
    result = run_virtual_arm(kit, "fix", parse_spec("sim:fix"), tmp_path)
    assert result.end_reason == "duration" and not result.stalled
    assert result.engine_s >= 1800
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["clock"] == "virtual" and meta["engine_s"] >= 1800
    assert not [e for e in _events(tmp_path) if e["type"].startswith("stall")]
    turns = _turns(tmp_path)
    assert sum(t["outcome"] == "ok" for t in turns) > 200
    # prompts are the sizes the planner asked for, served partly from the prefix cache
    assert all(t["prompt_tokens"] == t["expected_prompt_tokens"] for t in turns)
    assert sum(t["cached_tokens"] for t in turns) > 0
    assert "max wait" in (tmp_path / "engine.log").read_text()  # restores recomputed


def test_base_stall_lasts_until_read_timeouts_abort_then_generation_resumes(
    tmp_path: Path,
) -> None:
    """The incident's shape: spinning with work pending and 0 tok/s until the clients abort."""
    kit = load_kit("restore-stall", {"load.seed": SEED, "load.duration_s": 1800})
    result = run_virtual_arm(kit, "base", parse_spec("sim:base"), tmp_path, stop_on_stall=False)
    assert result.end_reason == "duration"
    events = _events(tmp_path)
    started = [e for e in events if e["type"] == "stall_started"]
    ended = [e for e in events if e["type"] == "stall_ended"]
    assert len(started) == 1 and len(ended) == 1 and started[0]["kind"] == "spinning"
    onset, end = started[0]["onset"], ended[0]["t"]
    at_onset = next(e for e in events if e["type"] == "sample" and e["t"] > onset + 5)
    assert at_onset["running"] > 0 and at_onset["waiting"] > 0 and at_onset["kv_usage"] > 0.95
    timeouts = [t for t in _turns(tmp_path) if t["outcome"] == "timeout"]
    assert timeouts, "no read timeout fired"
    # every abort is 600 s after the request's last byte, none before the stall's late phase
    assert all(abs(t["t_end"] - t["t_start"] - 600) < 1.5 for t in timeouts if not t["chunks"])
    first_abort = min(t["t_end"] for t in timeouts)
    assert first_abort > onset + 400
    # the stall holds until the aborts, and ends within a scrape or two of one of them
    assert end >= first_abort
    assert min(abs(end - t["t_end"]) for t in timeouts) <= 2.0
    after = [e for e in events if e["type"] == "sample" and e["t"] > end]
    assert sum(e["gen_tok_s"] for e in after) > 0


def test_a_virtual_stall_keeps_a_bundle_of_the_scheduler_at_the_verdict(tmp_path: Path) -> None:
    """In engine time, as deterministic as the arm: the state the detector judged, its inputs."""
    kit = load_kit("restore-stall", {"load.seed": SEED, "load.duration_s": 1800})
    first = tmp_path / "first"
    result = run_virtual_arm(kit, "base", parse_spec("sim:base"), first)
    assert result.stalled and result.end_reason == "stall_stop"
    started = next(e for e in _events(first) if e["type"] == "stall_started")
    (bundle,) = (first / "forensics").iterdir()
    manifest = read_json(bundle / "manifest.json", BundleManifest)
    assert manifest.kind == "spinning"  # the timeline rounds its times to the millisecond
    assert (manifest.t, manifest.onset) == pytest.approx((started["t"], started["onset"]), abs=1e-3)
    assert manifest.errors == [] and "metrics.txt" not in manifest.files  # no page to fetch
    state = json.loads((bundle / "sim-state.json").read_text())
    assert state["engine_time_s"] == manifest.t and state["policy"] == "base"
    # the stuck state the sample at the verdict shows, and the scheduler still stepping
    sample = next(e for e in _events(first) if e["type"] == "sample" and e["t"] == started["t"])
    assert len(state["running"]) == sample["running"] > 0
    assert len(state["waiting"]) == sample["waiting"] > 0
    assert state["pool"]["free"] == 0 and state["empty_steps"] > 1000 and not state["gpu_busy"]
    assert manifest.scheduler is not None and f"{sample['running']} running" in manifest.scheduler
    inputs = [json.loads(x) for x in (bundle / "inputs.jsonl").read_text().splitlines()]
    assert {x["type"] for x in inputs} == {"sample", "gpu"}
    assert min(x["t"] for x in inputs) >= started["t"] - kit.monitor.stall_after_s
    # the same arm again writes the same bundle
    again = tmp_path / "again"
    run_virtual_arm(kit, "base", parse_spec("sim:base"), again)
    for name in [*manifest.files, "manifest.json"]:
        assert (again / "forensics" / bundle.name / name).read_bytes() == (
            bundle / name
        ).read_bytes(), name


def _ab(out: Path, seeds: str) -> dict[str, Any]:
    plan = Plan.build(
        "restore-stall",
        {"base": "sim:base", "fix": "sim:fix"},
        out,
        {"load.duration_s": 1200},
        [],
        seeds=seeds,
        clock="virtual",
    )
    result = execute(plan, dashboard=False)
    assert result.report is not None and not result.interrupted
    return dict(json.loads((out / "ab.json").read_text()))


def test_same_kit_and_seeds_give_the_same_ab_json_even_on_a_busy_cpu(tmp_path: Path) -> None:
    first = _ab(tmp_path / "quiet", "7,8")
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)
    ]  # deliberately load both cores
    try:
        again = _ab(tmp_path / "busy", "7,8")
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    assert again == first
    for arm in ("base", "fix"):
        for seed in (7, 8):
            name = f"{arm}/seed-{seed}"
            for file in ("turns.jsonl", "timeline.jsonl", "engine.log"):
                quiet = (tmp_path / "quiet" / name / file).read_bytes()
                assert (tmp_path / "busy" / name / file).read_bytes() == quiet, (name, file)
    rows = {r["seed"]: r for r in first["arms"]["base"]["seeds"]}
    assert set(rows) == {7, 8} and rows[8]["stalled"] and rows[8]["stopped_run"]
    assert first["verdict"]["seeds"] == 2


def test_other_seeds_give_other_runs(tmp_path: Path) -> None:
    kit = load_kit("restore-stall", {"load.duration_s": 300, "load.agents": 4})
    for seed in (3, 4):
        seeded = kit.model_copy(update={"load": kit.load.model_copy(update={"seed": seed})})
        run_virtual_arm(seeded, "fix", parse_spec("sim:fix"), tmp_path / str(seed))
    assert _turns(tmp_path / "3") != _turns(tmp_path / "4")


@pytest.mark.parametrize("policy", ["base", "fix"])
def test_a_light_load_never_stalls(tmp_path: Path, policy: str) -> None:
    overrides = {"load.agents": 2, "load.duration_s": 600, "load.think_min_s": 5}
    kit = load_kit("restore-stall", overrides)
    result = run_virtual_arm(kit, policy, parse_spec(f"sim:{policy}"), tmp_path)
    assert not result.stalled and result.end_reason == "duration"
    turns = _turns(tmp_path)
    assert sum(t["outcome"] == "ok" for t in turns) > 5
    samples = [e for e in _events(tmp_path) if e["type"] == "sample"]
    assert samples[-1]["preemptions"] == 0


def _digest(arm_dir: Path) -> dict[str, Any]:
    """What an arm did, to the last bit: every turn record and every metrics sample."""
    records = read_records(arm_dir)
    samples = [e for e in _events(arm_dir) if e["type"] == "sample"]
    fields: tuple[str, ...] = ("t", "running", "waiting", "waiting_deferred", "kv_usage")
    fields += ("gen_tokens", "prompt_tokens", "preemptions", "prefix_queries", "prefix_hits")
    fields += ("iterations",)
    rows = [repr(tuple(s[f] for f in fields)) for s in samples]
    # the records' fields as they were pinned (prompt_parts and t_ready came later, describe only)
    rows += [repr(r.model_dump(mode="json", exclude={"prompt_parts", "t_ready"})) for r in records]
    last = samples[-1]
    return {
        "turns": len(records),
        "timeouts": sum(r.outcome == "timeout" for r in records),
        "preemptions": last["preemptions"],
        "prefix_queries": last["prefix_queries"],
        "restores_recomputed": (arm_dir / "engine.log").read_text().count("recomputing"),
        "sha256": hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16],
    }


#: What the restore-stall kit does over 1500 engine s, pinned when the simulator was sped up:
#: an optimisation must leave every request and every sample exactly as it was.
GOLDEN: dict[tuple[str, int], tuple[str, float, dict[str, Any]]] = {
    ("base", 8): (
        "stall_stop",
        1142.019,
        {
            "turns": 217,
            "timeouts": 0,
            "preemptions": 5.0,
            "prefix_queries": 20343467963.0,
            "restores_recomputed": 0,
            "sha256": "4c3215a9f9118660",
        },
    ),
    ("base", 15): (
        "stall_stop",
        742.001,
        {
            "turns": 126,
            "timeouts": 0,
            "preemptions": 1.0,
            "prefix_queries": 8337460187.0,
            "restores_recomputed": 0,
            "sha256": "65277edbba36d8de",
        },
    ),
    ("fix", 8): (
        "duration",
        1500.76,
        {
            "turns": 227,
            "timeouts": 1,
            "preemptions": 25.0,
            "prefix_queries": 18954363281.0,
            "restores_recomputed": 25,
            "sha256": "8a544f8ec9449890",
        },
    ),
    ("fix", 15): (
        "duration",
        1500.466,
        {
            "turns": 239,
            "timeouts": 0,
            "preemptions": 30.0,
            "prefix_queries": 21329067087.0,
            "restores_recomputed": 28,
            "sha256": "a9a7abe62c91390c",
        },
    ),
}


@pytest.mark.parametrize(("policy", "seed"), sorted(GOLDEN))
def test_runs_match_their_pinned_digest(tmp_path: Path, policy: str, seed: int) -> None:
    kit = load_kit("restore-stall", {"load.seed": seed, "load.duration_s": 1500})
    result = run_virtual_arm(kit, policy, parse_spec(f"sim:{policy}"), tmp_path)
    end_reason, engine_s, digest = GOLDEN[policy, seed]
    assert (result.end_reason, round(result.engine_s, 3)) == (end_reason, engine_s)
    assert _digest(tmp_path) == digest


def test_a_shared_system_prompt_is_one_cached_prefix_on_the_virtual_clock_too(
    tmp_path: Path,
) -> None:
    """`load.shared_system_prompt` shares the prefix as over HTTP (it was ignored here)."""
    cached: dict[bool, int] = {}
    for shared in (False, True):
        overrides = {"load.duration_s": 300, "load.agents": 4, "load.shared_system_prompt": shared}
        kit = load_kit("restore-stall", overrides)
        run_virtual_arm(kit, "fix", parse_spec("sim:fix"), tmp_path / str(shared))
        firsts = [
            t for t in _turns(tmp_path / str(shared)) if t["turn"] == 0 and t["cached_tokens"]
        ]
        cached[shared] = sum(t["cached_tokens"] for t in firsts)
    assert cached[False] == 0
    assert cached[True] >= kit.load.system_prompt_tokens // 2
