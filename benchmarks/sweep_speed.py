"""How fast `kit sweep` runs: local worker processes against a local Ray, and Ray's cost per task.

(a) The same small sweep (the README kit, --vary over max_num_seqs, --duration engine seconds
    per run) with local processes (one per core) and as Ray tasks on a Ray head started here
    (`ray start --head --block` on loopback, as many CPUs as cores): runs per second of each,
    every repetition and their median and spread.
(b) Ray's overhead per task: the wall time per task of `--tasks` empty tasks through the same
    cluster, over its CPUs, less nothing (the tasks do nothing).
(c) By calculation from those figures: a 10,000-run sweep on a 100-core cluster, with the
    mean CPU seconds of one run measured in (a) plus Ray's overhead per task, assuming the
    runs spread evenly and the driver keeps up.

    python benchmarks/sweep_speed.py [--duration 900] [--cells 4] [--seeds 3] [--repeat 3]
                                     [--tasks 200]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from stallkit.kits.sweep.runners import cores


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def ray_head(cpus: int) -> Iterator[str]:
    port, temp = _port(), tempfile.mkdtemp(prefix="skray-", dir="/tmp")
    ray = Path(sys.executable).parent / "ray"
    argv = [str(ray), "start", "--head", "--block", "--num-cpus", str(cpus), "--port", str(port)]
    # 127.0.0.2: Ray rewrites 127.0.0.1 to the machine's outside address; no token auth (the
    # token file is shared by every Ray on the machine)
    argv += ["--node-ip-address", "127.0.0.2", "--temp-dir", temp, "--include-dashboard", "false"]
    os.environ["RAY_AUTH_MODE"] = "disabled"
    argv += ["--disable-usage-stats"]
    log = Path(temp) / "start.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while "--block" not in log.read_text():
            time.sleep(0.2)
        yield f"127.0.0.2:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(3)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        shutil.rmtree(temp, ignore_errors=True)


def _sweep(args: argparse.Namespace, ray: str | None) -> tuple[float, int, float]:
    """(wall seconds, runs, mean compute seconds per run) of one sweep."""
    seqs = ",".join(str(2 + 2 * i) for i in range(args.cells))
    with tempfile.TemporaryDirectory() as tmp:
        argv = [
            sys.executable,
            "-m",
            "stallkit",
            "sweep",
            "--vary",
            f"sim.engine.max_num_seqs={seqs}",
        ]
        argv += ["--seeds", str(args.seeds), "--duration", str(args.duration), "--out", tmp + "/s"]
        argv += ["--no-dashboard", *(["--ray", ray] if ray else [])]
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        wall = time.perf_counter() - start
        runs = [
            json.loads(line) for line in Path(tmp, "s", "sweep-runs.jsonl").read_text().splitlines()
        ]
    return wall, len(runs), statistics.mean(r["compute_s"] for r in runs)


def _spread(values: list[float], unit: str) -> str:
    shown = ", ".join(f"{v:.2f}" for v in values)
    return f"{shown}; median {statistics.median(values):.2f} {unit} ({min(values):.2f}-{max(values):.2f})"


def _overhead(address: str, tasks: int) -> float:
    import ray

    ray.init(
        address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
    )
    try:

        @ray.remote(num_cpus=1)
        def nothing() -> None:
            return None

        ray.get([nothing.remote() for _ in range(min(tasks, 20))])  # workers started
        start = time.perf_counter()
        ray.get([nothing.remote() for _ in range(tasks)])
        return (time.perf_counter() - start) / tasks
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=900)
    parser.add_argument("--cells", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=200)
    args = parser.parse_args()
    n = cores()
    rates: dict[str, list[float]] = {"local processes": [], "local Ray": []}
    compute: list[float] = []
    with ray_head(n) as address:
        for _ in range(args.repeat):  # alternate, so that both see the same machine load
            for name, ray in (("local processes", None), ("local Ray", address)):
                wall, runs, per_run = _sweep(args, ray)
                rates[name].append(runs / wall)
                compute.append(per_run)
        overhead = [_overhead(address, args.tasks) for _ in range(args.repeat)]
    runs = args.cells * args.seeds * 2
    print(f"(a) {runs} runs of {args.duration:g} engine s on {n} cores, runs per second:")
    for name, values in rates.items():
        print(f"    {name}: {_spread(values, 'runs/s')}")
    print(f"    mean compute per run: {_spread(compute, 's')}")
    print(
        f"(b) Ray's wall time per empty task over {n} CPUs: {_spread([1000 * o for o in overhead], 'ms')}"
    )
    per_run = statistics.median(compute) + statistics.median(overhead) * n
    hours = 10_000 * per_run / 100 / 3600
    print(
        f"(c) 10,000 runs on a 100-core Ray cluster: 10,000 x ({statistics.median(compute):.2f} s "
        f"per run + {statistics.median(overhead) * n * 1000:.1f} ms Ray per task) / 100 cores "
        f"= {hours * 60:.1f} min"
    )


if __name__ == "__main__":
    main()
