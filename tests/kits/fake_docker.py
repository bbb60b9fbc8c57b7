"""A stand-in for the `docker` CLI, for launcher tests on machines without a docker engine.

It records every call as a JSON line in $FAKE_DOCKER_STATE/calls.jsonl and runs the
simulator as the "container": `run` starts `python -m engine.sim` detached on the published
host port, `logs --follow` tails its output, `inspect` reports whether it is alive, and
`rm --force` kills it. Images whose name contains `missing` do not exist; `crash` images
exit at once after printing a line.
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
            "engine.sim",
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


def main() -> int:
    args = sys.argv[1:]
    STATE.mkdir(parents=True, exist_ok=True)
    with (STATE / "calls.jsonl").open("a") as fh:
        fh.write(json.dumps(args) + "\n")
    if args[:2] == ["image", "inspect"]:
        return 1 if "missing" in args[2] else 0
    if args[0] == "pull":
        print("Error response from daemon: pull access denied", file=sys.stderr)
        return 1
    handlers = {"run": run, "logs": logs, "inspect": inspect, "rm": rm}
    return handlers[args[0]](args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
