"""The README's test command (`-n logical --dist loadgroup`) keeps tests that start real engines
on one worker: a child pytest with two workers runs tests marked `docker` beside plain ones, and
each test writes down which worker ran it.

This failed silently once: pytest 9.2 keeps a test's id where pytest-xdist 3.8 cannot add the
group to it, so the group marks were there and every worker took docker tests at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

pytestmark = pytest.mark.timeout(240)

CONFTEST = """
def pytest_configure(config):
    config.addinivalue_line("markers", "docker: needs a docker daemon")
"""

TESTS = """
import os, time
from pathlib import Path
import pytest

OUT = Path(os.environ["XDIST_PROBE_OUT"])

def _note(name):
    (OUT / name).write_text(os.environ.get("PYTEST_XDIST_WORKER", "none"))

@pytest.mark.docker
@pytest.mark.parametrize("n", range(4))
def test_engine(n):
    time.sleep(0.2)
    _note(f"engine-{n}")

@pytest.mark.parametrize("n", range(8))
def test_plain(n):
    time.sleep(0.2)
    _note(f"plain-{n}")
"""


def test_tests_that_start_real_engines_share_one_worker(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_probe.py").write_text(TESTS)
    (suite / "pytest.ini").write_text("[pytest]\n")
    out = tmp_path / "out"
    out.mkdir()
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "tests.conftest",
        "-n",
        "2",
        "--dist",
        "loadgroup",
    ]
    argv += ["-q", "-p", "no:cacheprovider", "-c", str(suite / "pytest.ini"), str(suite)]
    done = subprocess.run(
        argv,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
        env={**os.environ, "XDIST_PROBE_OUT": str(out)},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ran = {path.name: path.read_text() for path in out.iterdir()}
    assert len(ran) == 12, sorted(ran)
    engine_workers = {worker for name, worker in ran.items() if name.startswith("engine-")}
    assert len(engine_workers) == 1, f"engine tests ran on {sorted(engine_workers)}"
    assert set(ran.values()) == {"gw0", "gw1"}, "the plain tests spread over both workers"
