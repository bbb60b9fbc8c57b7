"""The `sim:` kind: the embedded simulator, over HTTP or in process on the virtual clock."""

from __future__ import annotations

import logging
from pathlib import Path

from stallkit.engine import EngineCore, Launcher, Overlay, SimConfig, SimEngine, SimSpec, with_fault
from stallkit.kits.arm.kinds.base import ArmKind, register
from stallkit.kits.kit import Kit

__all__ = ["SimKind"]


@register
class SimKind(ArmKind[SimSpec]):
    """`sim:base` / `sim:fix`: the embedded simulator, over HTTP or on the virtual clock."""

    spec_class = SimSpec
    clocks = ("wall", "virtual")
    plays_faults = True
    step_log = True
    real_steps = False
    target = "sim"

    def time_scale(self, kit: Kit) -> float:
        return kit.sim.time_scale

    def launcher(
        self,
        arm: str,
        spec: SimSpec,
        kit: Kit,
        arm_dir: Path,
        log_path: Path,
        overlays: list[Overlay],
    ) -> Launcher:
        from stallkit.engine import SimLauncher

        sim = kit.sim.engine_for(arm).model_dump(mode="json", exclude={"policy"})
        return SimLauncher(spec, arm_dir, sim, kit.sim.time_scale, log_path=log_path)

    def core(self, kit: Kit, spec: SimSpec, arm: str, log: logging.Logger) -> EngineCore:
        cfg = kit.sim.engine_for(arm).model_copy(update={"policy": spec.policy})
        config = SimConfig.model_validate(cfg.model_dump())
        return with_fault(SimEngine(config, log), config.fault)
