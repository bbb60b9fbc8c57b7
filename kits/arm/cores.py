"""The engine core of a virtual-clock arm, from its spec and the kit, as its kind builds it.

`sim:` arms get the simulator's core with the kit's `[sim.engine]` settings; `twin:` arms get
vLLM's own scheduler class (`stallkit.kits.arm.kinds.twin`). `arm_settings` says what an arm's
run depends on, so that `kit sweep` can note a --vary that changes nothing in an arm.
"""

from __future__ import annotations

import json
import logging

from stallkit.engine import EngineCore, EngineSpec
from stallkit.kits.arm.kinds import kind_of, twin_config
from stallkit.kits.kit import Kit

__all__ = ["arm_settings", "twin_config", "virtual_core"]


def arm_settings(kit: Kit, spec: EngineSpec, arm: str) -> str:
    """Everything an arm's run depends on, as one string: two kits giving the same string
    give the arm the same run (`kit sweep` notes a --vary that changes nothing in an arm)."""
    core = kind_of(spec).core_settings(kit, spec, arm)
    used = {"core": core, "load": kit.load.model_dump(mode="json")}
    return json.dumps(used | {"monitor": kit.monitor.model_dump(mode="json")}, sort_keys=True)


def virtual_core(kit: Kit, spec: EngineSpec, arm: str, log: logging.Logger) -> EngineCore:
    """The in-process engine core of a virtual-clock arm (`sim:` or `twin:`)."""
    return kind_of(spec).core(kit, spec, arm, log)
