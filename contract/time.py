"""The time base: engine seconds versus wall seconds, and the one conversion between them.

Every duration in a kit is in the unit its field declares (`json_schema_extra["unit"]`:
`engine` for what the engine's clock governs, `wall` for what the wall clock governs). A
wall-clock simulator arm runs `time_scale` engine seconds per wall second; real engines and
virtual-clock arms have scale 1. Inputs (the kit's durations) are converted with the nominal
scale, since nothing is measured before the arm runs; reports convert an arm's recorded wall
seconds back with the scale it measured, falling back to the nominal one when its engine
clock could not be read, and say which they used (`report_scale`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

__all__ = [
    "ScaleBasis",
    "TimeBase",
    "Unit",
    "duration_unit",
    "report_scale",
]

#: the unit of a duration: the engine's clock or the wall clock
Unit = Literal["engine", "wall"]
#: which time scale converted a figure: the one the arm measured, or the nominal one
ScaleBasis = Literal["measured", "nominal"]


@dataclass(frozen=True)
class TimeBase:
    """Engine seconds per wall second of an arm, and the one conversion between the two."""

    scale: float

    def to_wall(self, engine_s: float) -> float:
        """Wall seconds that `engine_s` engine seconds take."""
        return engine_s / self.scale

    def to_engine(self, wall_s: float) -> float:
        """Engine seconds that pass in `wall_s` wall seconds."""
        return wall_s * self.scale


def duration_unit(model: type[BaseModel], name: str) -> Unit | None:
    """The unit a field declares (None: not a duration)."""
    extra = model.model_fields[name].json_schema_extra
    unit = extra.get("unit") if isinstance(extra, dict) else None
    return "engine" if unit == "engine" else "wall" if unit == "wall" else None


def report_scale(nominal: float, measured: float | None) -> tuple[float, ScaleBasis]:
    """The scale a report converts an arm's wall seconds with, and which one it is."""
    if measured:
        return float(measured), "measured"
    return float(nominal), "nominal"
