"""A stall's forensics bundle index: `forensics/<onset>/manifest.json`.

Written by the monitor when a stall starts (with `inputs.jsonl`, the detector's inputs as
timeline lines, beside it), read by the reports to link each stall to its bundle and quote
its hottest frames. `t` and `onset` are seconds since the monitor started, on the arm's clock.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.timeline import StallKind

__all__ = ["MANIFEST_FILE", "BundleManifest"]

MANIFEST_FILE = "manifest.json"


class BundleManifest(BaseModel):
    """manifest.json of one forensics bundle."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    t: float | None = Field(
        None, description="When the stall was judged, seconds since the monitor started."
    )
    onset: float = Field(description="When the stall condition began, same clock as `t`.")
    kind: StallKind = Field(description="What the stall looks like (see StallKind).")
    files: list[str] = Field(
        default_factory=list, description="The bundle's files, relative to its directory."
    )
    errors: list[str] = Field(default_factory=list, description="What could not be collected.")
    top_frames: list[str] = Field(
        default_factory=list, description="Innermost frames of the hottest stack."
    )
    hot_leaves: list[str] = Field(
        default_factory=list, description="Busiest functions, each with its share of samples."
    )
    scheduler: str | None = Field(
        None, description="The simulator's scheduler state in one line (simulator arms only)."
    )
