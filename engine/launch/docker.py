"""Run an engine image with the `docker` CLI: GPU pinning, env profile, source overlay.

Every docker call is an argument list, never a shell string. The container runs detached
under a unique name with its port bound to 127.0.0.1 (or, on the host network, with the
engine told to listen on a free loopback port); its logs are followed into the run
directory; `stop()` removes it with `docker rm -f` whatever happened before, and ends an image
pull still under way rather than wait for it (a Ctrl-C must not wait an hour). A failed docker
command is reported with the line of its stderr that says why. An arm may run
on another docker host (a DOCKER_HOST URL such as `ssh://user@gpu-box`, or a docker context
name): every call then goes there, and the engine and its GPU telemetry are reached on the
loopback ports forwarded from that host.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stallkit.contract.gpu import GpuSource
from stallkit.engine.errors import EngineError
from stallkit.engine.launch.base import (
    Launcher,
    engine_api_key,
    kill_process_group,
    serve_first_request,
    wait_for_health,
)
from stallkit.engine.spec import EngineSpec

DOCKER_TIMEOUT_S = 120.0
#: an engine image is tens of GB: its pull may take this long (stop() ends it at once)
PULL_TIMEOUT_S = 3600.0
#: the environment variable that puts a vLLM's metrics in multiprocess mode
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(frozen=True)
class Overlay:
    """A host source tree bind-mounted read-only over a path inside the image."""

    source: Path
    dest: str

    @classmethod
    def parse(cls, text: str) -> Overlay:
        src, sep, dest = text.partition(":")
        if not sep or not src or not dest.startswith("/"):
            raise EngineError(
                f"bad overlay {text!r}",
                "write --overlay SRC:DEST with an absolute DEST in the image",
            )
        path = Path(src).expanduser().resolve()
        if not path.exists():
            raise EngineError(f"overlay source {src!r} does not exist", "check the path")
        return cls(path, dest)


@dataclass(frozen=True)
class DockerOptions:
    """What the kit says about running an image."""

    gpus: Sequence[int] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    container_port: int = 8000
    host_port: int = 8000
    shm_size: str = "16g"
    ipc_host: bool = True
    extra_args: Sequence[str] = ()
    engine_args: Sequence[str] = ()
    overlays: Sequence[Overlay] = ()
    name_prefix: str = "stallkit"
    #: docker --network; "host" publishes nothing: the engine listens on host_port itself
    network: str = ""
    #: the docker host: a DOCKER_HOST URL (unix://, tcp://, ssh://) or a context name; "" = default
    docker_host: str = ""
    #: the engine's DCGM exporter as reached from here; "{engine_url}" is replaced
    dcgm_url: str = ""


def docker_cli(docker_host: str) -> list[str]:
    """The `docker` command with its global option for a docker host or context."""
    if not docker_host:
        return ["docker"]
    if "://" in docker_host:
        return ["docker", "--host", docker_host]
    return ["docker", "--context", docker_host]


def container_env(opts: DockerOptions) -> dict[str, str]:
    """The environment the container gets: the kit's profile, told where to listen on the
    host network (the engine shares the host's ports there, so it takes the free one)."""
    env = dict(opts.env)
    if opts.network == "host":
        env["PORT"] = str(opts.host_port)
        env["HOST"] = "127.0.0.1"
    return env


#: in engine arguments, replaced by the port the engine listens on inside the container
PORT_PLACEHOLDER = "{port}"


def engine_port(opts: DockerOptions) -> int:
    """The port the engine listens on inside the container (the host's, on the host network)."""
    return opts.host_port if opts.network == "host" else opts.container_port


def docker_run_argv(image: str, name: str, opts: DockerOptions) -> list[str]:
    """The `docker run` argument list for an image (pure; tested for the real CLI's forms)."""
    argv = ["docker", "run", "--detach", "--name", name, "--label", "stallkit=1"]
    if opts.gpus:
        # the inner quotes keep docker's CSV parser from splitting the device list
        argv += ["--gpus", '"device=' + ",".join(str(g) for g in opts.gpus) + '"']
    if opts.ipc_host:
        argv.append("--ipc=host")
    if opts.shm_size:
        argv += ["--shm-size", opts.shm_size]
    if opts.network:
        argv += ["--network", opts.network]
    if opts.network != "host":
        argv += ["--publish", f"127.0.0.1:{opts.host_port}:{opts.container_port}"]
    for key, value in container_env(opts).items():
        argv += ["--env", f"{key}={value}"]
    for overlay in opts.overlays:
        argv += ["--volume", f"{overlay.source}:{overlay.dest}:ro"]
    argv += list(opts.extra_args)
    argv.append(image)
    # an image whose entrypoint is the engine itself (vLLM's `vllm serve`) takes its port as
    # an argument, not from the PORT variable: `--port {port}`
    port = str(engine_port(opts))
    argv += [a.replace(PORT_PLACEHOLDER, port) for a in opts.engine_args]
    return argv


#: a container's CPU account as seen inside it: cgroup v2's, and cgroup v1's (nanoseconds)
CPU_STAT_PATH = "/sys/fs/cgroup/cpu.stat"
CPUACCT_USAGE_PATH = "/sys/fs/cgroup/cpuacct/cpuacct.usage"
CPU_STAT_TIMEOUT_S = 5.0


def parse_cpu_stat(text: str) -> float | None:
    """CPU seconds from a cgroup v2 `cpu.stat` (its `usage_usec` line), or from a cgroup v1
    `cpuacct.usage` (one number of nanoseconds); None if neither is there."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec" and value.strip().isdigit():
            return int(value) / 1e6
    for line in text.splitlines():
        if line.strip().isdigit():
            return int(line) / 1e9
    return None


#: the pointer to `--help` the docker CLI prints after its error ("Run 'docker run --help' for
#: more information", older: "See 'docker run --help'.")
_HELP_POINTER_RE = re.compile(r"^(Run|See) 'docker .*--help'")


def docker_error_line(stderr: str) -> str:
    """The line of a failed docker command's stderr that says why: the last line naming an
    error, else the last line, without the help pointer after it or the CLI's `docker: ` prefix."""
    lines = [
        line.strip()
        for line in stderr.splitlines()
        if line.strip() and not _HELP_POINTER_RE.match(line.strip())
    ]
    errors = [line for line in lines if "error" in line.lower()]
    line = (errors or lines or ["no output"])[-1]
    return line.removeprefix("docker: ")


def _docker(
    args: Sequence[str], timeout_s: float = DOCKER_TIMEOUT_S, docker_host: str = ""
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [*docker_cli(docker_host), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except FileNotFoundError:
        raise EngineError(
            "the docker CLI is not installed", "install docker or use sim:/vllm: specs"
        ) from None
    except subprocess.TimeoutExpired:
        raise EngineError(
            f"docker {args[0]} did not answer in {timeout_s:.0f} s", "is the docker daemon up?"
        ) from None


class DockerLauncher(Launcher):
    """One container of an engine image for one arm."""

    def __init__(self, spec: EngineSpec, opts: DockerOptions, log_path: Path) -> None:
        self.spec = spec
        self.opts = opts
        self.log_path = log_path
        self._log_file = log_path
        self.name = f"{opts.name_prefix}-{secrets.token_hex(4)}"
        self._started = False
        self._logs: subprocess.Popen[bytes] | None = None
        #: the `docker pull` in flight, which stop() ends rather than waits for
        self._pull: subprocess.Popen[bytes] | None = None
        #: set by stop(): a start() still under way (pulling) gives up instead of running
        self._stopped = False
        # held while `docker run` is in flight (never across a pull), so a stop() from another
        # thread (Ctrl-C, SIGTERM) waits for the container to exist before removing it
        self._lock = threading.Lock()

    def _docker(
        self, args: Sequence[str], timeout_s: float = DOCKER_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        return _docker(args, timeout_s, self.opts.docker_host)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.opts.host_port}"

    @property
    def gpu_source(self) -> GpuSource:
        if self.opts.dcgm_url:
            return GpuSource("dcgm", url=self.opts.dcgm_url.replace("{engine_url}", self.url))
        if not self.opts.gpus:
            return GpuSource("none")
        return GpuSource("nvml" if _has_pynvml() else "smi", tuple(self.opts.gpus))

    def _ensure_image(self) -> None:
        image = self.spec.target
        if self._docker(["image", "inspect", image]).returncode == 0:
            return
        code, stderr = self._pull_image(image)
        if code != 0:
            where = f" on {self.opts.docker_host}" if self.opts.docker_host else ""
            raise EngineError(
                f"image {image} is not available{where}: {docker_error_line(stderr)}",
                "check the image name and registry login (or build it: kit engine image)",
            )

    def _pull_image(self, image: str) -> tuple[int, str]:
        """`docker pull` as a child that stop() can end; its exit code and stderr."""
        argv = [*docker_cli(self.opts.docker_host), "pull", image]
        # its progress lines are of no use here; stderr holds the reason of a failure
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        with self._lock:
            self._pull = proc
            stopped = self._stopped  # a stop() that came before the pull was registered
        try:
            if stopped:
                kill_process_group(proc, grace_s=2.0)
            _, err = proc.communicate(timeout=PULL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_process_group(proc, grace_s=2.0)
            raise EngineError(
                f"docker pull {image} did not finish in {PULL_TIMEOUT_S:.0f} s",
                "pull the image by hand (docker pull), then run again",
            ) from None
        finally:
            with self._lock:
                self._pull = None
        if self._stopped:
            raise self._stopped_error("while its image was pulled")
        return proc.returncode, err.decode("utf-8", "replace")

    def _stopped_error(self, when: str) -> EngineError:
        return EngineError(
            f"container {self.name} was stopped {when}", "start a new launcher to run it again"
        )

    def start(self) -> None:
        with self._lock:
            if self._stopped:
                raise self._stopped_error("before it started")
            if self._started:
                return
        if shutil.which("docker") is None:
            raise EngineError(
                "the docker CLI is not installed", "install docker or use sim:/vllm: specs"
            )
        self._ensure_image()  # without the lock: stop() ends a pull instead of waiting for it
        with self._lock:
            if self._stopped:
                raise self._stopped_error("before it started")
            if self._started:
                return
            argv = docker_run_argv(self.spec.target, self.name, self.opts)
            self._started = True  # from here on, stop() must remove the container
            done = self._docker(argv[1:])
            if done.returncode != 0:
                raise EngineError(
                    f"docker run failed: {docker_error_line(done.stderr)}",
                    "is the port free and are the GPUs visible?",
                )
            self._follow_logs()

    def _follow_logs(self) -> None:
        self._log_file.parent.mkdir(parents=True, exist_ok=True)
        with self._log_file.open("ab") as log:
            self._logs = subprocess.Popen(
                [*docker_cli(self.opts.docker_host), "logs", "--follow", self.name],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def _dead_reason(self) -> str | None:
        fmt = "{{.State.Status}} {{.State.ExitCode}}"
        state = self._docker(["inspect", "--format", fmt, self.name])
        if state.returncode != 0:
            return "container is gone"
        status, _, code = state.stdout.strip().partition(" ")
        return (
            None
            if status in ("created", "running", "restarting")
            else f"{status}, exit code {code}"
        )

    def exit_reason(self) -> str | None:
        return self._dead_reason() if self._started else None

    def cpu_argv(self) -> list[str]:
        """The `docker` arguments that read the container's CPU account (cgroup v2 or v1:
        `cat` prints the one that exists and fails on the other)."""
        return ["exec", self.name, "cat", CPU_STAT_PATH, CPUACCT_USAGE_PATH]

    def cpu_seconds(self) -> float | None:
        """CPU seconds the container has used, from its own cgroup; None when unreadable."""
        if not self._started:
            return None
        try:
            result = self._docker(self.cpu_argv(), timeout_s=CPU_STAT_TIMEOUT_S)
        except EngineError:
            return None
        # `cat` exits 1 for the account the host's cgroup version lacks: read what it printed
        return parse_cpu_stat(result.stdout)

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last_check = [0.0]

        def alive() -> str | None:
            # `docker inspect` is slow-ish: ask at most every 2 s
            if time.monotonic() - last_check[0] < 2.0:
                return None
            last_check[0] = time.monotonic()
            reason = self._dead_reason()
            if reason is not None:
                self._drain_logs()
            return reason

        wait_for_health(self.url, timeout_s, alive, self.log_path, f"container {self.name}")
        if MULTIPROC_ENV in self.opts.env:
            # the warm-up shares the start-up limit: health and it together take at most timeout_s
            key = engine_api_key(self.opts.engine_args, self.opts.env)
            left_s = max(deadline - time.monotonic(), 1.0)
            serve_first_request(self.url, left_s, f"container {self.name}", self.log_path, key)

    def _drain_logs(self) -> None:
        """Let the log follower write the dead container's last lines before they are read."""
        if self._logs is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._logs.wait(timeout=5)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._pull is not None:  # the start() pulling sees _stopped and gives up
                kill_process_group(self._pull, grace_s=2.0)
            if not self._started:
                return
            with contextlib.suppress(EngineError):
                self._docker(["rm", "--force", self.name], timeout_s=60)
            if self._logs is not None:
                kill_process_group(self._logs, grace_s=2.0)
                self._logs = None
            self._started = False


def _has_pynvml() -> bool:
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return False
    return True
