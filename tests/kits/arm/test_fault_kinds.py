"""Every fault the simulator plays, on the virtual clock: the restore-stall kit's fix arm
(which does not stall by itself) with a fault striking at 300 engine seconds, judged by the
monitor's detector with the kind that fault plays, one interval after onset + stall_after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stallkit.engine import parse_spec
from stallkit.engine.sim.config import FaultKind
from stallkit.engine.sim.faults import PLAYS
from stallkit.kits.arm.virtual import run_virtual_arm
from stallkit.kits.kit import load_kit

AT_S = 300.0


def _stalls(arm_dir: Path) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in (arm_dir / "timeline.jsonl").read_text().splitlines()]
    return [x for x in lines if x["type"] == "stall_started"]


@pytest.mark.parametrize("fault", list(PLAYS))
def test_each_fault_is_caught_with_its_kind(fault: FaultKind, tmp_path: Path) -> None:
    overrides = {"load.duration_s": 900, "sim.engine.fault": {"kind": fault, "at_s": AT_S}}
    kit = load_kit("restore-stall", overrides)
    result = run_virtual_arm(kit, "fix", parse_spec("sim:fix"), tmp_path)
    assert result.stalled and result.end_reason == "stall_stop"
    [stall] = _stalls(tmp_path)
    mon = kit.monitor
    assert stall["kind"] == PLAYS[fault]
    # the last progress is at the strike, or (blocked) when the running requests drain
    assert AT_S <= stall["onset"] <= AT_S + 30
    delay = stall["t"] - (stall["onset"] + mon.stall_after_s)
    assert 0 <= delay <= mon.interval_s


def test_a_twin_arm_refuses_a_fault(tmp_path: Path) -> None:
    from stallkit.engine import EngineError

    kit = load_kit("restore-stall", {"sim.engine.fault": {"kind": "freeze", "at_s": 1}})
    with pytest.raises(EngineError, match="cannot play"):
        run_virtual_arm(kit, "stock", parse_spec("twin:stock"), tmp_path)


def test_a_plan_with_a_twin_arm_and_a_fault_is_refused_before_anything_runs() -> None:
    from stallkit.kits.arm.kinds import check_arm_kinds
    from stallkit.kits.errors import KitError

    kit = load_kit("restore-stall", {"sim.engine.fault": {"kind": "freeze", "at_s": 1}})
    with pytest.raises(KitError, match=r"stock: twin arms cannot play \[sim.engine\] fault \("):
        check_arm_kinds(kit, {"base": parse_spec("sim:base"), "stock": parse_spec("twin:stock")})
    check_arm_kinds(kit, {"base": parse_spec("sim:base")})  # sim arms play it


def test_the_twin_refuses_a_fault_by_one_rule_wherever_it_runs(tmp_path: Path) -> None:
    """An arm's core, the plan's check and `kit sim serve --core` give the same refusal."""
    import logging

    from stallkit.engine import EngineError
    from stallkit.engine.serve.server import ServeOptions, make_core
    from stallkit.engine.sim.config import Fault, SimConfig
    from stallkit.engine.twin.config import FAULT_HINT
    from stallkit.kits.arm.kinds import check_arm_kinds, kind_of
    from stallkit.kits.errors import KitError

    kit = load_kit("restore-stall", {"sim.engine.fault": {"kind": "block", "at_s": 1}})
    spec = parse_spec("twin:stock")
    with pytest.raises(EngineError) as core:
        kind_of(spec).core(kit, spec, "stock", logging.getLogger("test"))
    with pytest.raises(KitError) as plan:
        check_arm_kinds(kit, {"stock": spec})
    served = ServeOptions(core="twin:stock", config=SimConfig(fault=Fault(kind="block", at_s=1)))
    with pytest.raises(EngineError) as server:
        make_core(served)
    assert core.value.message == "twin:stock cannot play [sim.engine] fault (block)"
    assert plan.value.message == "stock: twin arms cannot play [sim.engine] fault (block)"
    assert server.value.message == "--core twin:stock cannot play a fault (block)"
    assert core.value.hint == plan.value.hint == server.value.hint == FAULT_HINT


def test_a_kit_names_a_fault_as_kind_at_seconds_too() -> None:
    from stallkit.kits.errors import KitError

    spec = load_kit("restore-stall", {"sim.engine.fault": "hidden_freeze@60"})
    table = load_kit("restore-stall", {"sim.engine.fault": {"kind": "hidden_freeze", "at_s": 60}})
    assert spec.sim.engine.fault == table.sim.engine.fault is not None
    with pytest.raises(KitError, match="is not KIND@SECONDS"):
        load_kit("restore-stall", {"sim.engine.fault": "hidden_freeze"})
