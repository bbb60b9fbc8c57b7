"""A stand-in for the `docker` CLI, for launcher tests on machines without a docker engine.

It records every call as a JSON line in $FAKE_DOCKER_STATE/calls.jsonl and runs the
simulator as the "container": `run` starts `python -m stallkit.engine.serve` detached on the published
host port, `logs --follow` tails its output, `inspect` reports whether it is alive, and
`rm --force` kills it. Images whose name contains `missing` do not exist; `crash` images
exit at once after printing a line; `nogpu` images fail to run as on a host without the
NVIDIA runtime; `slowpull` images are not there and their pull takes a minute. `info` and
`network ls` describe a daemon with the NVIDIA runtime and a bridge network, unless
$FAKE_DOCKER_DAEMONS (JSON: docker host -> {"runtimes": [...], "networks": [...]}, or
{"down": true} for a daemon that does not answer, "" for the
default host) says otherwise; a global `--host`/`--context` picks the host.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ["FAKE_DOCKER_STATE"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def _opt(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def run(args: list[str]) -> int:
    name = _opt(args, "--name") or "anon"
    host_port = (_opt(args, "--publish") or "127.0.0.1:0:0").split(":")[1]
    # the image is the first argument after the options: skip flag/value pairs
    takes_value = {"--name", "--label", "--gpus", "--shm-size", "--publish", "--env", "--volume"}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in takes_value else 1
    image = args[i]
    if "nogpu" in image:  # what docker itself prints where no runtime gives containers GPUs
        print(
            'docker: Error response from daemon: could not select device driver "" with '
            "capabilities: [[gpu]].\n\nRun 'docker run --help' for more information",
            file=sys.stderr,
        )
        return 125
    if "crash" in image:
        argv = [
            sys.executable,
            "-c",
            "print('engine: fatal error, cannot allocate KV cache'); raise SystemExit(3)",
        ]
    else:
        policy = "fix" if image.endswith(":fix") else "base"
        argv = [
            sys.executable,
            "-m",
            "stallkit.engine.serve",
            "--policy",
            policy,
            "--port",
            host_port,
            "--time-scale",
            "20",
        ]
    log = (STATE / f"{name}.log").open("ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (STATE / f"{name}.pid").write_text(str(proc.pid))
    print(f"{name}-container-id")
    return 0


def logs(args: list[str]) -> int:
    name = args[-1]
    pid = int((STATE / f"{name}.pid").read_text())
    with (STATE / f"{name}.log").open("rb") as fh:
        while True:
            chunk = fh.read()
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            elif not _alive(pid):
                return 0
            time.sleep(0.05)


def inspect(args: list[str]) -> int:
    pid_file = STATE / f"{args[-1]}.pid"
    if not pid_file.exists():
        print("Error: No such object", file=sys.stderr)
        return 1
    pid = int(pid_file.read_text())
    print("running 0" if _alive(pid) else "exited 3")
    return 0


def rm(args: list[str]) -> int:
    pid_file = STATE / f"{args[-1]}.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        pid_file.unlink()
    return 0


#: what `info` and `network ls` report for a docker host without an entry in $FAKE_DOCKER_DAEMONS
DEFAULT_DAEMON = {
    "runtimes": ["io.containerd.runc.v2", "nvidia", "runc"],
    "networks": ["bridge", "host", "none"],
}


#: what the docker CLI says when its daemon is not running
DAEMON_DOWN = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?"
)


def _daemon(host: str) -> dict[str, list[str]]:
    daemons = json.loads(os.environ.get("FAKE_DOCKER_DAEMONS", "{}"))
    return {**DEFAULT_DAEMON, **daemons.get(host, {})}


def info(host: str) -> int:
    runtimes = _daemon(host)["runtimes"]
    print(json.dumps({"Runtimes": {name: {} for name in runtimes}, "DefaultRuntime": "runc"}))
    return 0


def network(host: str) -> int:
    for name in _daemon(host)["networks"]:
        print(name)
    return 0


def pull(image: str) -> int:
    if "slowpull" in image:  # a pull of an engine image: tens of GB
        (STATE / "pull.pid").write_text(str(os.getpid()))
        time.sleep(60)
        return 0
    print("Error response from daemon: pull access denied", file=sys.stderr)
    return 1


def main() -> int:
    args = sys.argv[1:]
    STATE.mkdir(parents=True, exist_ok=True)
    with (STATE / "calls.jsonl").open("a") as fh:
        fh.write(json.dumps(args) + "\n")
    host = ""
    if args[0] in ("--host", "--context"):  # the global option naming a docker host
        host, args = args[1], args[2:]
    if json.loads(os.environ.get("FAKE_DOCKER_DAEMONS", "{}")).get(host, {}).get("down"):
        print(DAEMON_DOWN, file=sys.stderr)
        return 1
    if args[:2] == ["image", "inspect"]:
        return 1 if "missing" in args[2] or "slowpull" in args[2] else 0
    if args[0] in ("info", "network"):
        return info(host) if args[0] == "info" else network(host)
    if args[0] == "pull":
        return pull(args[1])
    handlers = {"run": run, "logs": logs, "inspect": inspect, "rm": rm}
    return handlers[args[0]](args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
