"""What a GPU does beside its utilisation gauge: its power draw and its SMs' activity. Pure.

DCGM's utilisation (`DCGM_FI_DEV_GPU_UTIL`) counts time a kernel was resident, so a kernel
that hangs, or a context stuck in a spin, reads 100 % busy. Power draw
(`DCGM_FI_DEV_POWER_USAGE`, watts) and SM activity (`DCGM_FI_PROF_SM_ACTIVE`, the share of
cycles an SM has a warp resident) tell the two apart: a GPU that computes, or spins its SMs
in a collective, draws power with its SMs active; one whose gauge says busy while its SMs sit
idle (activity near 0) is doing nothing. The detector reads SM activity that way, and puts
both in a stall's evidence (`StallEvidence`); power draw alone is evidence, not a rule (what
is idle power differs from one GPU model to the next).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from stallkit.contract import names
from stallkit.monitor.errors import MonitorError

__all__ = ["SM_IDLE_FRACTION", "GpuActivity", "parse_dcgm_activity"]

#: SM activity at or under which a GPU's SMs count as idle, whatever its utilisation gauge
SM_IDLE_FRACTION = 0.05


@dataclass(frozen=True, slots=True)
class GpuActivity:
    """Power draw (W) and SM activity (0..1) by GPU index; a GPU without one is absent."""

    power_w: Mapping[str, float] = field(default_factory=dict)
    sm_active: Mapping[str, float] = field(default_factory=dict)

    @property
    def sms_idle(self) -> bool:
        """Whether SM activity is known and every GPU's is at or under `SM_IDLE_FRACTION`."""
        return bool(self.sm_active) and all(v <= SM_IDLE_FRACTION for v in self.sm_active.values())

    def __bool__(self) -> bool:
        return bool(self.power_w or self.sm_active)


_WANTED = {names.DCGM_POWER_USAGE: "power_w", names.DCGM_SM_ACTIVE: "sm_active"}


def parse_dcgm_activity(text: str) -> GpuActivity:
    """Power draw and SM activity per `gpu` label from a DCGM exporter page (empty where the
    exporter does not export them: SM activity needs DCGM's profiling metrics enabled)."""
    wanted = "\n".join(x for x in text.splitlines() if x.startswith(tuple(_WANTED)))
    found: dict[str, dict[str, float]] = {"power_w": {}, "sm_active": {}}
    try:
        for family in text_string_to_metric_families(wanted + "\n"):
            for sample in family.samples:
                key = _WANTED.get(sample.name)
                if key is not None and "gpu" in sample.labels:
                    found[key][sample.labels["gpu"]] = float(sample.value)
    except ValueError as exc:
        raise MonitorError(f"malformed DCGM exporter text: {exc}") from None
    return GpuActivity(found["power_w"], found["sm_active"])
