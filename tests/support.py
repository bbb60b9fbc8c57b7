"""Helpers the test packages share: the checkout's root and `kit` run as a real child process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def kit(*args: str, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`kit ARGS` in a child process (`python -m kits`), its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "kits", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        check=False,
    )
