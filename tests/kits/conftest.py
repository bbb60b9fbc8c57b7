"""Fixtures for kit tests: a fake `docker` executable first on PATH."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Put a `docker` that runs the simulator as its container first on PATH; yield its state dir."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "docker-state"
    script = bin_dir / "docker"
    script.write_text(
        f"#!{sys.executable}\nimport runpy, sys\nsys.path.insert(0, {str(REPO)!r})\n"
        f"runpy.run_path({str(REPO / 'tests' / 'kits' / 'fake_docker.py')!r}, run_name='__main__')\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(state))
    yield state
