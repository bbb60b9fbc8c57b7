"""`kit.json`: the resolved kit as a run wrote it, typed as far as readers of a run need.

The kit's own model belongs to the orchestration (`stallkit.kits.kit.Kit`); this contract layer
cannot import it, so it types what the reports read (the name, the load's seed, the log
patterns the A/B table counts, the SLOs and the non-inferiority test, whose models live here)
and keeps every other section as a JSON object. An arm's copy
adds the nominal `time_scale` it ran at; the A/B directory's copy has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.files import KIT_FILE
from stallkit.contract.slo import SloConfig, VerdictConfig

__all__ = ["KIT_FILE", "KitFile", "KitFileLoad", "KitFileReport"]


class KitFileLoad(BaseModel):
    """The kit's load section: the seed is what reports read; the rest is kept as written."""

    model_config = ConfigDict(frozen=True, extra="allow")
    seed: int | None = Field(None, description="The load's seed.")
    duration_s: float | None = Field(None, description="The load's length, engine seconds.")


class KitFileReport(BaseModel):
    """The kit's report section."""

    model_config = ConfigDict(frozen=True, extra="allow")
    log_patterns: dict[str, str] = Field(
        default_factory=dict, description="Row name -> regular expression counted per log line."
    )


class KitFile(BaseModel):
    """kit.json (sections other than `load`, `report`, `slo` and `verdict` as written by the
    kit's model)."""

    # the body is the kit's model, which may grow sections: keep what this layer does not know
    model_config = ConfigDict(frozen=True, extra="allow")
    name: str = Field("kit", description="The kit's short name.")
    description: str = Field("", description="What the kit reproduces.")
    engine: dict[str, Any] = Field(default_factory=dict, description="The engine profile.")
    sim: dict[str, Any] = Field(default_factory=dict, description="The simulator section.")
    patched: dict[str, Any] = Field(default_factory=dict, description="The patched engine.")
    load: KitFileLoad = Field(default_factory=KitFileLoad, description="The load.")
    monitor: dict[str, Any] = Field(default_factory=dict, description="The monitor settings.")
    report: KitFileReport = Field(default_factory=KitFileReport, description="The report.")
    time_scale: float | None = Field(
        None,
        description="Nominal engine seconds per wall second the arm ran at (arm copy only).",
        exclude_if=lambda value: value is None,  # absent from the A/B directory's copy
    )
    # the sections below come after time_scale, where kit.json has always had them
    twin: dict[str, Any] = Field(default_factory=dict, description="The twin section.")
    slo: SloConfig | None = Field(
        None,
        description="The service-level objectives (absent: the kit set none).",
        exclude_if=lambda value: value is None,
    )
    verdict: VerdictConfig | None = Field(
        None,
        description="The non-inferiority test (absent: the default one where the kit sets SLOs).",
        exclude_if=lambda value: value is None,
    )

    @classmethod
    def of(cls, kit: Mapping[str, Any], time_scale: float | None = None) -> KitFile:
        """kit.json of a kit's JSON dump (`time_scale`: the arm's nominal scale; None for the
        A/B directory's copy)."""
        body = dict(kit) | ({} if time_scale is None else {"time_scale": time_scale})
        return cls.model_validate(body)
