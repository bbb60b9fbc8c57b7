"""The cache's build-once rule: a complete build is not redone, a missing one is built once,
its lock and log beside its folder."""

from __future__ import annotations

from pathlib import Path

from stallkit.engine.cache import CachedBuild, build_once


class _Thing(CachedBuild):
    def __init__(self, root: Path) -> None:
        self.path = root / "things" / "1.0"


def test_a_build_runs_only_while_the_thing_is_not_built(tmp_path: Path) -> None:
    thing = _Thing(tmp_path)
    marker = thing.path / "marker"
    builds: list[int] = []

    def build() -> None:
        builds.append(1)
        thing.path.mkdir()
        marker.write_text("done")

    build_once(marker.is_file, thing.lock_path, build)
    build_once(marker.is_file, thing.lock_path, build)
    assert builds == [1]
    assert thing.lock_path == tmp_path / "things" / "1.0.lock" and thing.lock_path.is_file()
    assert thing.log_path == tmp_path / "things" / "1.0.build.log"
