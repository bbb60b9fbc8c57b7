"""The cache's build-once rule: a complete build is not redone, a missing one is built once."""

from __future__ import annotations

from pathlib import Path

from stallkit.engine.cache import build_once


def test_a_build_runs_only_while_the_thing_is_not_built(tmp_path: Path) -> None:
    marker = tmp_path / "thing" / "marker"
    builds: list[int] = []

    def build() -> None:
        builds.append(1)
        marker.parent.mkdir()
        marker.write_text("done")

    lock = tmp_path / "thing.lock"
    build_once(marker.is_file, lock, build)
    build_once(marker.is_file, lock, build)
    assert builds == [1] and lock.is_file()
