"""Choose and build the launcher for an arm's engine spec, and convert kit durations.

A kit gives each duration in the unit its field declares (`json_schema_extra["unit"]` on the
load and monitor models): engine seconds for what the engine's clock governs (pauses, read
timeouts, the run's length, scrape interval, stall thresholds), wall seconds for what the
wall clock governs (TCP connect and scrape timeouts, the GPU telemetry's averaging window).
A wall-clock simulator arm runs `time_scale` engine seconds per wall second; its `TimeBase`
is the one conversion between the two (`stallkit.contract.time`). Reports convert back with the scale
each arm measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from stallkit.contract.files import ENGINE_LOG
from stallkit.contract.time import TimeBase, Unit, duration_unit
from stallkit.engine import EngineSpec, Launcher, Overlay
from stallkit.kits.arm.kinds import kind_of
from stallkit.kits.kit import Kit
from stallkit.loadgen import LoadConfig, rates_in_wall
from stallkit.monitor import MonitorConfig

__all__ = [
    "TimeBase",
    "Unit",
    "duration_unit",
    "load_config",
    "make_launcher",
    "monitor_config",
    "time_scale",
]

#: the monitor never scrapes more often than this (wall seconds)
MIN_INTERVAL_S = 0.05


def time_scale(spec: EngineSpec, kit: Kit) -> float:
    """Engine seconds per wall second for an arm: the kit's for the simulator and for images
    (1 unless a simulator image runs faster), else 1."""
    return kind_of(spec).time_scale(kit)


def _in_wall(model: type[BaseModel], fields: dict[str, Any], base: TimeBase) -> dict[str, Any]:
    out = dict(fields)
    for key, value in fields.items():
        if duration_unit(model, key) == "engine" and isinstance(value, int | float):
            out[key] = base.to_wall(value)
    return out


def load_config(kit: Kit, scale: float) -> LoadConfig:
    """The kit's load in wall seconds for an engine at `scale`."""
    base = TimeBase(scale)
    fields = rates_in_wall(_in_wall(LoadConfig, kit.load.model_dump(), base), base)
    return LoadConfig.model_validate(fields)


def monitor_config(kit: Kit, scale: float) -> MonitorConfig:
    """The kit's monitor settings in wall seconds for an engine at `scale`."""
    raw = kit.monitor.model_dump(exclude={"gpu_source"})
    fields = _in_wall(MonitorConfig, raw, TimeBase(scale))
    fields["interval_s"] = max(MIN_INTERVAL_S, fields["interval_s"])
    return MonitorConfig.model_validate(fields)


def make_launcher(
    arm: str, spec: EngineSpec, kit: Kit, arm_dir: Path, overlays: list[Overlay] | None = None
) -> Launcher:
    """The launcher for one arm; logs go to `arm_dir/engine.log`."""
    return kind_of(spec).launcher(arm, spec, kit, arm_dir, arm_dir / ENGINE_LOG, overlays or [])
