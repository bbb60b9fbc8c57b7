"""The user's stallkit cache, and building a thing there once.

What stallkit builds on this machine (a vLLM release's environment, llama.cpp's server) is kept
under `$STALLKIT_CACHE`, else `~/.cache/stallkit`. Each build writes a marker file last, so a
folder without one is half built (a build cut short) and is built again; a lock file beside it
lets one process build at a time, and a process that waited for the lock looks again before
building (another may have built it meanwhile).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel

__all__ = ["CachedBuild", "build_once", "cache_root", "locked", "write_marker"]


def cache_root() -> Path:
    """The user's stallkit cache: `$STALLKIT_CACHE`, else `~/.cache/stallkit`."""
    configured = os.environ.get("STALLKIT_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "stallkit"


class CachedBuild:
    """A folder of the cache that is built once; its lock and its build's log sit beside it."""

    path: Path

    @property
    def lock_path(self) -> Path:
        return self.path.parent / f"{self.path.name}.lock"

    @property
    def log_path(self) -> Path:
        """The build's full output (beside the build, kept on failure)."""
        return self.path.parent / f"{self.path.name}.build.log"


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` (created) while the block runs."""
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_once(built: Callable[[], bool], lock_path: Path, build: Callable[[], None]) -> None:
    """Run `build` unless `built()` says the build is complete, one process at a time."""
    if built():
        return
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with locked(lock_path):
        if built():  # another process built it while this one waited
            return
        build()


def write_marker(path: Path, marker: BaseModel, indent: int) -> None:
    """Write a complete build's marker (the build's last step: its presence says complete)."""
    path.write_text(marker.model_dump_json(indent=indent) + "\n", encoding="utf-8")
