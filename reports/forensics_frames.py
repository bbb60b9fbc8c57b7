"""The forensics bundles of a saved arm: where each stall's bundle is and its hottest frames.

Reads `forensics/<onset>/manifest.json` in an arm directory (written at stall onset); a torn
or missing manifest is skipped, never an error, so a report can always be made.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stallkit.contract.ab import BundleLink
from stallkit.contract.errors import RunFileError
from stallkit.contract.files import FORENSICS_DIR
from stallkit.contract.forensics import MANIFEST_FILE, BundleManifest
from stallkit.contract.jsonl import read_json

__all__ = ["BundleItem", "BundleLink", "bundle_items", "markdown_lines", "read_bundles"]


def read_bundles(arm_dir: Path, scale: float) -> list[BundleLink]:
    """The arm's bundles in onset order (times scaled to engine seconds)."""
    links = []
    for path in sorted((arm_dir / FORENSICS_DIR).glob(f"*/{MANIFEST_FILE}")):
        try:
            manifest = read_json(path, BundleManifest)
        except RunFileError:
            continue  # a bundle cut short by the end of the run: the report goes on without it
        links.append(
            BundleLink(
                onset_s=round(manifest.onset * scale, 3),
                kind=manifest.kind,
                path=str(path.parent.relative_to(arm_dir)),
                top_frames=manifest.top_frames,
                hot_leaves=manifest.hot_leaves,
                scheduler=manifest.scheduler,
                errors=len(manifest.errors),
            )
        )
    return links


@dataclass(frozen=True)
class BundleItem:
    """One line of a report's forensics section."""

    stall: str  # e.g. "base: spinning stall at 901 s"
    path: str  # the bundle's directory, relative to the report
    frames: list[str]  # its hottest frames (code)
    scheduler: str | None  # the simulator's state in one line


def bundle_items(arms: dict[str, list[BundleLink]], prefix_arm: bool) -> list[BundleItem]:
    """Each stall's bundle, linked from the report's directory (through the arm's when the
    report has several arms), with its top frames and the simulator's scheduler state."""
    return [
        BundleItem(
            stall=f"{name}: {link.kind} stall at {link.onset_s:.0f} s",
            path=f"{name}/{link.path}" if prefix_arm else link.path,
            frames=(link.hot_leaves[:3] or link.top_frames[:3]),
            scheduler=link.scheduler,
        )
        for name, links in arms.items()
        for link in links
    ]


def markdown_lines(arms: dict[str, list[BundleLink]], prefix_arm: bool) -> list[str]:
    """The report's forensics section: each stall linked to its bundle, its top frames and (for
    the simulator) its scheduler state quoted."""
    lines: list[str] = []
    for item in bundle_items(arms, prefix_arm):
        quoted = [f"`{f}`" for f in item.frames] + ([item.scheduler] if item.scheduler else [])
        shown = "; ".join(quoted) or "no stack dump"
        lines.append(f"- {item.stall}: [{item.path}]({item.path}/) — {shown}")
    return ["", "## Stall forensics", "", *lines] if lines else []
