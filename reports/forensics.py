"""The forensics bundles of a saved arm: where each stall's bundle is and its hottest frames.

Reads `forensics/<onset>/manifest.json` in an arm directory (written at stall onset); a torn
or missing manifest is skipped, never an error, so a report can always be made.
"""

from __future__ import annotations

from pathlib import Path

from contract.ab import BundleLink
from contract.errors import RunFileError
from contract.files import FORENSICS_DIR
from contract.forensics import MANIFEST_FILE, BundleManifest
from contract.jsonl import read_json

__all__ = ["BundleLink", "markdown_lines", "read_bundles"]


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


def markdown_lines(arms: dict[str, list[BundleLink]], prefix_arm: bool) -> list[str]:
    """The report's forensics section: each stall linked to its bundle, its top frames and (for
    the simulator) its scheduler state quoted."""
    lines: list[str] = []
    for name, links in arms.items():
        for link in links:
            path = f"{name}/{link.path}" if prefix_arm else link.path
            quoted = link.hot_leaves[:3] or link.top_frames[:3]
            frames = "; ".join(f"`{f}`" for f in quoted)
            if link.scheduler:
                frames = f"{frames}; {link.scheduler}" if frames else link.scheduler
            frames = frames or "no stack dump"
            lines.append(
                f"- {name}: {link.kind} stall at {link.onset_s:.0f} s: [{path}]({path}/) — {frames}"
            )
    return ["", "## Stall forensics", "", *lines] if lines else []
