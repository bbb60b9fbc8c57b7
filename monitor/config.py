"""The monitor's configuration: one frozen, validated model, all durations in wall seconds.

The kit hands wall seconds, so the detector and the scrape loop never need to know about
engine time. Each duration field declares (`json_schema_extra["unit"]`) whether a kit gives
it in engine seconds (converted with the arm's time base) or in wall seconds: the GPU
telemetry's averaging window and the scrape timeout are wall time on any engine. Invalid thresholds are a
user error: `monitor_config()` turns pydantic's report into one `MonitorError` line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from stallkit.contract.errors import validation_message
from stallkit.monitor.errors import MonitorError


class MonitorConfig(BaseModel):
    """How often to scrape and when an engine counts as stalled (wall seconds)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interval_s: float = Field(
        1.0, gt=0, description="Seconds between two scrapes.", json_schema_extra={"unit": "engine"}
    )
    stall_after_s: float = Field(
        60.0,
        gt=0,
        description="Seconds the stall rule must hold before a stall starts.",
        json_schema_extra={"unit": "engine"},
    )
    stop_after_s: float | None = Field(
        240.0,
        gt=0,
        description="Seconds of one stall after which a stop is requested; unset: never.",
        json_schema_extra={"unit": "engine"},
    )
    idle_gpu_perc: float = Field(
        5.0, ge=0, le=100, description="A GPU at or under this utilisation (%) counts as idle."
    )
    gpu_window_s: float = Field(
        1.0,
        ge=0,
        description="GPU utilisation averages this trailing window; readings within it "
        "after a stall's onset may still show earlier work and are not held against it.",
        json_schema_extra={"unit": "wall"},
    )
    scrape_timeout_s: float = Field(
        5.0,
        gt=0,
        description="Seconds a /metrics or GPU read may take before it is a failure.",
        json_schema_extra={"unit": "wall"},
    )

    @model_validator(mode="after")
    def _stop_after_stall(self) -> Self:
        if self.stop_after_s is not None and self.stop_after_s < self.stall_after_s:
            raise ValueError(
                f"stop_after_s ({self.stop_after_s:g}) must be >= stall_after_s "
                f"({self.stall_after_s:g})"
            )
        return self


def monitor_config(*, names: Mapping[str, str] | None = None, **fields: Any) -> MonitorConfig:
    """Build a `MonitorConfig`, reporting invalid values as one `MonitorError`.

    `names` maps fields to what the user wrote for them (a command line's flags)."""
    try:
        return MonitorConfig(**fields)
    except ValidationError as exc:
        raise MonitorError(
            f"invalid monitor setting {validation_message(exc, names=names, default='')}",
            hint="thresholds are positive seconds and stop-after >= stall-after",
        ) from None
