"""The wedge whose gauges say idle: the simulator's `hidden_freeze` stops answering and reads
nothing running and nothing waiting. stallkit's own runs count the requests their agents wait
on as pending work and catch it as a frozen stall, named as hidden; a monitor without the
clients (`kit monitor` alone) reads the same engine as idle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stallkit.contract.timeline import StallEvidence
from stallkit.engine import parse_spec
from stallkit.kits.arm.virtual import run_virtual_arm
from stallkit.kits.kit import load_kit
from stallkit.monitor import MonitorConfig
from stallkit.monitor.detect.detector import StallDetector
from stallkit.monitor.signals.parse import MetricsSnapshot
from tests.support import REPO, kit, kit_process, served_sim

AT_S = 300.0


def _lines(arm_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (arm_dir / "timeline.jsonl").read_text().splitlines()]


def test_a_hidden_freeze_is_caught_on_the_virtual_clock_and_named_hidden(tmp_path: Path) -> None:
    overrides = {
        "load.duration_s": 900,
        "sim.engine.fault": {"kind": "hidden_freeze", "at_s": AT_S},
    }
    kit_ = load_kit("restore-stall", overrides)
    result = run_virtual_arm(kit_, "fix", parse_spec("sim:fix"), tmp_path)
    assert result.stalled and result.end_reason == "stall_stop"
    lines = _lines(tmp_path)
    [stall] = [x for x in lines if x["type"] == "stall_started"]
    assert stall["kind"] == "frozen" and AT_S <= stall["onset"] <= AT_S + kit_.monitor.interval_s
    evidence = StallEvidence.model_validate(stall["evidence"])
    waiting = evidence.client_waiting
    assert waiting is not None and 0 < waiting <= kit_.load.agents
    assert evidence.words() == f"engine reports idle, {waiting} requests waiting on clients"
    # the engine's own page said idle the whole stall
    after = [x for x in lines if x["type"] == "sample" and x["t"] > AT_S + 1]
    assert after and all(x["running"] == 0 and x["waiting"] == 0 for x in after)
    # the same pages from just before the strike, without the clients' count: idle, never a
    # stall (what `kit monitor` sees)
    detector = StallDetector(
        MonitorConfig.model_validate(kit_.monitor.model_dump(exclude={"gpu_source"})),
        gpu_checked=False,
    )
    events = []
    for x in lines:
        if x["type"] == "sample" and x["t"] >= AT_S - 5:
            fields = {k: v for k, v in x.items() if k not in ("type", "t", "gen_tok_s", "engines")}
            events += detector.observe(x["t"], MetricsSnapshot(**fields))
    assert events == [] and detector.state.status == "idle"
    # ab.md's table says what hid it
    report = kit("report", str(tmp_path), timeout=60)
    assert report.returncode == 0, report.stderr
    assert (
        f"engine reports idle, {waiting} requests waiting on clients"
        in (tmp_path / "run.md").read_text()
    )


def test_a_plain_freeze_names_no_hidden_evidence(tmp_path: Path) -> None:
    overrides = {"load.duration_s": 900, "sim.engine.fault": {"kind": "freeze", "at_s": AT_S}}
    result = run_virtual_arm(
        load_kit("restore-stall", overrides), "fix", parse_spec("sim:fix"), tmp_path
    )
    assert result.stalled
    [stall] = [x for x in _lines(tmp_path) if x["type"] == "stall_started"]
    assert stall["kind"] == "frozen" and "evidence" not in stall


@pytest.mark.wallclock
def test_on_the_wall_clock_a_run_catches_what_kit_monitor_alone_reads_as_idle(
    tmp_path: Path,
) -> None:
    """`kit sim serve --fault hidden_freeze@40` at 10x: a `kit run` attached to it (small
    contexts: no prefill near stall_after) stops on a frozen stall named hidden, while `kit monitor` beside it, without the clients, reads the
    same engine as idle (about 25 wall s, most of it three processes starting)."""
    source = (REPO / "kits" / "shipped" / "restore-stall.toml").read_text()
    quick = source.replace("stall_after_s = 60", "stall_after_s = 10")
    quick = quick.replace("stop_after_s = 240", "stop_after_s = 20").replace(
        "interval_s = 1", "interval_s = 2"
    )
    kit_file = tmp_path / "quick.toml"
    kit_file.write_text(quick)
    assert quick.count("_after_s = ") == 2 and quick != source
    with served_sim("--time-scale", "10", "--fault", "hidden_freeze@40") as url:
        alone = kit_process(
            "monitor", url, "--interval", "0.2", "--stall-after", "1", "--stop-after", "0",
            "--duration", "12", "--exit-on-stall", "--no-dashboard",
            "--out", str(tmp_path / "alone"),
        )  # fmt: skip
        run = kit(
            "run", "--engine", f"url:{url}", "--kit", str(kit_file), "--duration", "300",
            "--agents", "4", "--min-context", "2000", "--max-context", "8000", "--no-dashboard",
            "--out", str(tmp_path / "run"), timeout=100,
        )  # fmt: skip
        out, err = alone.communicate(timeout=60)
    assert run.returncode == 0, run.stderr
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["end_reason"] == "stall_stop", meta
    [stall] = [x for x in _lines(tmp_path / "run") if x["type"] == "stall_started"]
    assert stall["kind"] == "frozen" and stall["evidence"]["client_waiting"] > 0, stall
    assert "engine reports idle" in " ".join(run.stdout.split()), run.stdout
    # kit monitor alone: the duration passed without a stall (exit 0, not 3)
    assert alone.returncode == 0, (out, err)
    assert not [x for x in _lines(tmp_path / "alone") if x["type"] == "stall_started"]
