"""The forensics bundles of a saved arm: where each stall's bundle is and its hottest frames.

Reads `forensics/<onset>/manifest.json` in an arm directory (written at stall onset); a torn
or missing manifest is skipped, never an error, so a report can always be made. The frames
quoted are py-spy's samples of every Python process of the engine, the metrics exporter and
the HTTP server included: the engine's own frames (its scheduler's) are listed before those
of the standard library, of serving libraries and of metrics code, which can out-sample a
spinning scheduler without being the stall's cause.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from stallkit.contract.ab import BundleLink
from stallkit.contract.errors import RunFileError
from stallkit.contract.files import FORENSICS_DIR
from stallkit.contract.forensics import MANIFEST_FILE, BundleManifest
from stallkit.contract.jsonl import read_json

__all__ = [
    "BundleItem",
    "BundleLink",
    "bundle_items",
    "engine_first",
    "frame_rank",
    "markdown_lines",
    "read_bundles",
]

#: a frame's file in py-spy's output: `fn (pkg/mod.py:12)`, a leaf `fn (pkg/mod.py) 40%`
_FILE = re.compile(r"\(([^()]*?)(?::\d+)?\)(?: \d+%)?$")
#: code that serves or exports metrics rather than schedules: last of all
_METRICS = re.compile(r"prometheus|opentelemetry|(^|/)metrics(/|\.py$)")
#: serving and I/O libraries of an engine's processes (py-spy names files by package)
_LIBRARIES = frozenset(
    {"uvicorn", "starlette", "fastapi", "anyio", "uvloop", "zmq", "httpx", "httpcore", "h11"}
)
#: what the quoted frames are, by where they came from
_PROFILE = {
    "leaves": "busiest functions in py-spy samples of the engine's processes, its own first",
    "stack": "hottest py-spy stack of the engine's processes, its own frames first",
}


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


def frame_rank(frame: str) -> int:
    """0 for the engine's own code, 1 for the standard library and serving libraries, 2 for
    metrics code (`prometheus_client`, an engine's `metrics` module)."""
    match = _FILE.search(frame)
    path = match.group(1).replace("\\", "/") if match else ""
    if _METRICS.search(path):
        return 2
    if "-packages/" in path:  # a full file name (py-spy --full-filenames): its package
        path = path.rsplit("-packages/", 1)[1]
    elif path.startswith("<") or "/lib/python" in path:
        return 1  # py-spy's frozen modules, or a full file name in the standard library
    top = path.split("/", 1)[0].removesuffix(".py")
    return 1 if top in sys.stdlib_module_names or top in _LIBRARIES else 0


def engine_first(frames: list[str]) -> list[str]:
    """The frames with the engine's own first, then libraries', then metrics code's (each
    group in its given order: hottest first)."""
    return sorted(frames, key=frame_rank)


@dataclass(frozen=True)
class BundleItem:
    """One line of a report's forensics section."""

    stall: str  # e.g. "base: spinning stall at 901 s"
    path: str  # the bundle's directory, relative to the report
    frames: list[str]  # its hottest frames (code), the engine's own first
    scheduler: str | None  # the simulator's state in one line
    profile: str = ""  # what the frames are ("" without frames)

    @property
    def library(self) -> list[bool]:
        """Per frame, whether it is library or metrics code rather than the engine's."""
        return [frame_rank(f) > 0 for f in self.frames]


def _item(name: str, link: BundleLink, prefix_arm: bool) -> BundleItem:
    source = "leaves" if link.hot_leaves else "stack"
    frames = engine_first(link.hot_leaves or link.top_frames)[:3]
    return BundleItem(
        stall=f"{name}: {link.kind} stall at {link.onset_s:.0f} s",
        path=f"{name}/{link.path}" if prefix_arm else link.path,
        frames=frames,
        scheduler=link.scheduler,
        profile=_PROFILE[source] if frames else "",
    )


def bundle_items(arms: dict[str, list[BundleLink]], prefix_arm: bool) -> list[BundleItem]:
    """Each stall's bundle, linked from the report's directory (through the arm's when the
    report has several arms), with its top frames (the engine's own first) and the simulator's
    scheduler state."""
    return [_item(name, link, prefix_arm) for name, links in arms.items() for link in links]


def markdown_lines(arms: dict[str, list[BundleLink]], prefix_arm: bool) -> list[str]:
    """The report's forensics section: each stall linked to its bundle, its top frames and (for
    the simulator) its scheduler state quoted."""
    lines: list[str] = []
    for item in bundle_items(arms, prefix_arm):
        quoted = [f"`{f}`" for f in item.frames] + ([item.scheduler] if item.scheduler else [])
        shown = "; ".join(quoted) or "no stack dump"
        if item.profile:
            shown = f"{item.profile}: {shown}"
        lines.append(f"- {item.stall}: [{item.path}]({item.path}/) — {shown}")
    return ["", "## Stall forensics", "", *lines] if lines else []
