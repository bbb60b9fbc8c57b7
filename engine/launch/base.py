"""The launcher interface shared by every engine spec, and a process-group launcher.

A launcher starts an engine (or attaches to one), waits until it is healthy, tells the
URL, GPU source and log file, and stops it. `stop()` is idempotent and guaranteed: every
process group it started is gone afterwards, whatever happened before.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx
import psutil

from stallkit.contract.files import STOP_MARKER
from stallkit.contract.gpu import GpuSource
from stallkit.engine.errors import EngineError
from stallkit.engine.spec import EngineSpec

HEALTH_POLL_S = 0.2
#: environment variable that marks every process of one launch, so stop() finds them all
TAG_ENV = "STALLKIT_ENGINE_TAG"


#: how long the start-up check waits for an attached engine's port to accept a connection
LISTEN_CHECK_S = 3.0


def check_listening(url: str, raw: str, timeout_s: float = LISTEN_CHECK_S) -> None:
    """Before anything starts: something must accept a connection at an attached engine's
    host and port (an engine still loading its model already listens, so its start-up time
    is not cut short); EngineError naming `url/health` otherwise."""
    parts = httpx.URL(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.host, port), timeout=timeout_s):
            return
    except socket.gaierror:
        why = f"host {parts.host} not found"
    except TimeoutError:
        why = f"no answer in {timeout_s:g} s"
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
    raise EngineError(
        f"{raw}: nothing answers at {url}/health ({why})",
        "start the engine first, or check the URL (url: specs attach to a running engine; "
        "they start nothing)",
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago (the engine binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def tail_lines(path: Path | None, count: int = 12) -> str:
    """The last `count` lines of a log file, for error messages."""
    if path is None or not path.exists():
        return ""
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 16384))
        lines = fh.read().decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-count:])


class Launcher(ABC):
    """Start, wait for, describe and stop one engine."""

    spec: EngineSpec
    log_path: Path | None = None

    @abstractmethod
    def start(self) -> None:
        """Begin starting the engine; returns without waiting for health."""

    @abstractmethod
    def wait_healthy(self, timeout_s: float) -> None:
        """Block until `/health` answers 200; raise EngineError if the engine dies or times out."""

    @property
    @abstractmethod
    def url(self) -> str:
        """Base URL of the engine's OpenAI-compatible server (no trailing slash)."""

    @property
    def gpu_source(self) -> GpuSource:
        """The monitor's GPU source for this engine (`none`, `nvml:0,1`, `dcgm:URL`, ...)."""
        return GpuSource("none")

    @abstractmethod
    def stop(self) -> None:
        """Stop everything this launcher started. Idempotent; never raises."""

    def pids(self) -> list[int]:
        """PIDs of processes this launcher started and still holds (for tests and checks)."""
        return []

    def cpu_seconds(self) -> float | None:
        """The engine's cumulative CPU seconds (all its processes), None where unknown."""
        return None

    def exit_reason(self) -> str | None:
        """Why an engine this launcher started has ended on its own (None while it runs).

        Asked while a run is under way, so that an engine that died is reported as such and
        not as a stall or a pile of failed requests. An attached engine never says.
        """
        return None

    def __enter__(self) -> Launcher:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def wait_for_health(
    url: str,
    timeout_s: float,
    alive: Callable[[], str | None],
    log_path: Path | None,
    what: str,
) -> None:
    """Poll `url/health` until 200. `alive()` returns a reason string once the engine died."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while True:
            dead = alive()
            if dead is not None:
                tail = tail_lines(log_path)
                msg = f"{what} exited before it was healthy ({dead})"
                if tail:
                    msg += "; last log lines:\n" + tail
                raise EngineError(
                    msg, f"see {log_path}" if log_path else "check the engine's output"
                )
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{url}/health").status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise EngineError(
                    f"{what} was not healthy after {timeout_s:.0f} s",
                    f"raise the kit's engine.startup_timeout_s, or read {log_path}"
                    if log_path
                    else f"is the engine running and serving {url}/health? "
                    "(url: specs attach to a running engine; they start nothing)",
                )
            time.sleep(HEALTH_POLL_S)


def engine_api_key(args: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The API key a vLLM server was started with, or None: `--api-key` wins over VLLM_API_KEY.

    vLLM then refuses `/v1/...` without it (`/health` and `/metrics` stay open), so a launcher's
    own request must send it too. As in vLLM's parser, the last `--api-key` (or `--api_key`)
    counts, and any of the keys it lists is accepted: the first is taken. A key that reaches a
    container some other way (`docker run --env-file` in the kit's docker args) is not seen.
    """
    key = None
    for i, arg in enumerate(args):
        flag, _, inline = arg.partition("=")
        if flag not in ("--api-key", "--api_key"):
            continue
        if inline:
            key = inline
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            key = args[i + 1]
    return key or env.get("VLLM_API_KEY") or None


def serve_first_request(
    url: str, timeout_s: float, what: str, log_path: Path | None, api_key: str | None
) -> None:
    """Serve one 1-token completion, so that the engine's gauges appear on /metrics.

    With PROMETHEUS_MULTIPROC_DIR set (a vLLM whose engine-core process exports metrics,
    such as the patched scheduler), a gauge appears on the page only once it is set, and
    vLLM sets its scheduler gauges (requests running and waiting, KV usage) only when it
    records a step: until then the monitor would find no vLLM signals.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(base_url=url, timeout=timeout_s, headers=headers) as client:
            model = client.get("/v1/models").raise_for_status().json()["data"][0]["id"]
            body = {"model": model, "prompt": "warm up", "max_tokens": 1}
            client.post("/v1/completions", json=body).raise_for_status()
            return
    except httpx.HTTPStatusError as exc:
        # httpx's own text runs over several lines, with a link: the status is what matters
        problem = f"HTTP {exc.response.status_code} from {exc.request.url.path}"
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
        problem = " ".join(f"{type(exc).__name__}: {exc}".split()).rstrip(":")
    raise EngineError(
        f"{what} did not serve its first request ({problem})",
        f"see {log_path}" if log_path else "check the engine's output",
    )


def reset_prefix_cache(url: str, timeout_s: float = 10.0) -> str | None:
    """Ask an engine to drop its prefix cache, and its connector's (vLLM's
    `POST /reset_prefix_cache?reset_external=true`), so that a seed does not start with the
    previous seed's prompts cached. None: it did; else why not, in a few words (vLLM serves
    the endpoint only with VLLM_SERVER_DEV_MODE=1). Never raises."""
    try:
        response = httpx.post(
            f"{url}/reset_prefix_cache", params={"reset_external": "true"}, timeout=timeout_s
        )
    except httpx.HTTPError as exc:
        return f"not reset ({type(exc).__name__})"
    if response.status_code in (404, 405):
        return "not offered by the engine (vLLM offers it with VLLM_SERVER_DEV_MODE=1)"
    if response.status_code != 200:
        return f"not reset (HTTP {response.status_code})"
    try:
        said = response.json()
    except ValueError:
        said = None
    if isinstance(said, dict) and said.get("success") is False:
        return "not reset (the engine still held blocks)"
    return None


def kill_process_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the process group, wait up to grace_s, then SIGKILL it. Never raises."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = None
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
            # a stopped (SIGSTOPped) group must be continued to act on SIGTERM
            os.killpg(pgid, signal.SIGCONT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Live processes whose environment carries `TAG_ENV=tag` (never this process).

    A launch's descendants inherit the tag even when they leave its process group or are
    re-parented after their parent died, which a process-group kill would miss.
    """
    needle = f"{TAG_ENV}={tag}".encode()
    found: list[psutil.Process] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            if needle in environ.split(b"\0"):
                proc = psutil.Process(int(entry.name))
                if _alive(proc):
                    found.append(proc)
        except (OSError, psutil.Error):  # gone meanwhile, or not ours to read
            continue
    return found


def reap(procs: list[psutil.Process], timeout_s: float = 10.0) -> list[int]:
    """SIGCONT and SIGKILL each process, then wait until every one is gone; the survivors.

    psutil refuses to signal a PID that was reused by another process since `procs` were
    taken, so a process that already ended is never confused with a newcomer.
    """
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGCONT)
            proc.kill()
    # a killed process with a large address space takes a while to be torn down; a zombie
    # (dead, waiting for its parent) counts as gone
    deadline = time.monotonic() + timeout_s
    alive = procs
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.05)
    return [p.pid for p in alive]


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


class ProcessLauncher(Launcher):
    """Runs an engine as a child process in its own process group, logging to a file."""

    #: a subclass may set this to read the listening URL from the log (port 0 servers)
    url_pattern: re.Pattern[str] | None = None

    def __init__(
        self,
        spec: EngineSpec,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        url: str | None = None,
        grace_s: float = 10.0,
        cwd: Path | None = None,
    ) -> None:
        self.spec = spec
        self.argv = list(argv)
        self.log_path = log_path
        self.tag = uuid.uuid4().hex
        self.env = {**(os.environ if env is None else env), TAG_ENV: self.tag}
        self._url = url
        self.grace_s = grace_s
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop_marked = False

    def start(self) -> None:
        if self._proc is not None:
            return
        assert self.log_path is not None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.env,
                    cwd=self.cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                raise EngineError(
                    f"cannot start {self.argv[0]}: {exc.strerror}", "is it installed and on PATH?"
                ) from None

    def _dead_reason(self) -> str | None:
        if self._proc is None:
            return "not started"
        code = self._proc.poll()
        return None if code is None else f"exit code {code}"

    def _discover_url(self, deadline: float) -> str:
        assert self.url_pattern is not None
        while time.monotonic() < deadline:
            text = self.log_path.read_text("utf-8", "replace") if self.log_path else ""
            match = self.url_pattern.search(text)
            if match:
                return match.group(1).rstrip("/")
            dead = self._dead_reason()
            if dead is not None:
                raise EngineError(
                    f"{self.spec.raw} exited at start-up ({dead}); last log lines:\n"
                    + tail_lines(self.log_path),
                    f"see {self.log_path}",
                )
            time.sleep(0.05)
        raise EngineError(f"{self.spec.raw} did not report its URL", f"see {self.log_path}")

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        if self._url is None and self.url_pattern is not None:
            self._url = self._discover_url(deadline)
        wait_for_health(
            self.url,
            max(0.1, deadline - time.monotonic()),
            self._dead_reason,
            self.log_path,
            self.spec.raw,
        )

    @property
    def url(self) -> str:
        if self._url is None:
            raise EngineError(f"{self.spec.raw} has no URL yet", "call wait_healthy() first")
        return self._url

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The child process, for signals in tests (e.g. SIGSTOP of a real engine)."""
        return self._proc

    def stop(self) -> None:
        if self._proc is None:
            return
        self._mark_stop()
        # taken before the kill: a dying process may no longer show its environment
        family = tagged_processes(self.tag)
        kill_process_group(self._proc, self.grace_s)
        seen = {p.pid for p in family}
        reap(family + [p for p in tagged_processes(self.tag) if p.pid not in seen])

    def _mark_stop(self) -> None:
        """Append STOP_MARKER to the engine log once, while the engine still runs."""
        if self._proc is None or self._proc.poll() is not None or self._stop_marked:
            return
        self._stop_marked = True
        if self.log_path is not None:
            with contextlib.suppress(OSError), self.log_path.open("a", encoding="utf-8") as log:
                log.write(f"\n{STOP_MARKER}\n")

    def pids(self) -> list[int]:
        return [self._proc.pid] if self._proc is not None and self._proc.poll() is None else []

    def exit_reason(self) -> str | None:
        return None if self._proc is None else self._dead_reason()
