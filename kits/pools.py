"""Worker processes for virtual-clock runs: `kit ab`'s arms, `kit sweep`'s and `kit hunt`'s runs.

A run of a `sim:` arm may go to any worker. A run of a `twin:` arm imports vLLM, so it goes to
a fresh (spawned) worker whose vLLM logging is quiet and whose `vllm` modules come from the
arm's source tree when it has one: one pool per kind of worker (`WorkerKind`), the cores
shared among the pools, and the calling process never imports vLLM. Results reach the
caller as each run finishes, in whatever order. Ctrl-C in the caller cancels what has not
started and interrupts what is running (each run sees KeyboardInterrupt in its worker and
ends as interrupted), then re-raises.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, TypeVar

from engine import install_overlay, parse_spec, quiet_vllm_logging
from kits.config import Kit

__all__ = ["PooledJob", "WorkerKind", "cores", "run_pooled", "worker_kind"]

R = TypeVar("R")


@dataclass(frozen=True)
class WorkerKind:
    """What a worker process must be for a run: a plain one, or a twin's (with its tree)."""

    twin: bool = False
    overlay: str | None = None  # the source tree a twin worker imports vllm/... from


#: one run for `run_pooled`: the kind of worker it needs and the arguments of its function
PooledJob = tuple[WorkerKind, tuple[Any, ...]]


def worker_kind(kit: Kit, arm: str, spec: str) -> WorkerKind:
    """The worker an arm of `kit` run by `spec` needs."""
    if parse_spec(spec).kind != "twin":
        return WorkerKind()
    return WorkerKind(twin=True, overlay=kit.twin.overlay_for(arm))


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity outside Linux
        return os.cpu_count() or 1


def _init(kind: WorkerKind) -> None:
    # an idle worker ignores Ctrl-C (the caller stops the pool); a busy one stops its run.
    # SIGTERM is the pool's own way to end a worker, not the command line's Ctrl-C.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if kind.twin:  # before the worker imports vLLM: its log lines go to the arm's log, its
        quiet_vllm_logging()  # modules come from the arm's source tree when it has one
        if kind.overlay is not None:
            install_overlay(kind.overlay)


def _interruptible(fn: Callable[..., R], *args: Any) -> R:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return fn(*args)
    finally:
        signal.signal(signal.SIGINT, previous)


def run_pooled(
    fn: Callable[..., R],
    jobs: Sequence[PooledJob],
    on_result: Callable[[R], None],
    workers: int,
) -> None:
    """`fn(*args)` for every job, in worker processes; `on_result` for each as it finishes.

    With one worker (or one job) and no twin run, the jobs run here, one after another.
    """
    groups: dict[WorkerKind, list[tuple[Any, ...]]] = {}
    for kind, args in jobs:
        groups.setdefault(kind, []).append(args)
    if not groups:
        return
    plain = groups.get(WorkerKind(), [])
    if len(groups) == 1 and plain and min(workers, len(plain)) <= 1:
        for args in plain:
            on_result(fn(*args))
        return
    share = max(1, workers // len(groups))
    with contextlib.ExitStack() as stack:
        futures: list[Future[R]] = []
        for kind, group in groups.items():
            pool = ProcessPoolExecutor(
                max_workers=min(len(group), share),
                mp_context=multiprocessing.get_context("spawn") if kind.twin else None,
                initializer=_init,
                initargs=(kind,),
            )
            stack.enter_context(pool)
            futures += [pool.submit(_interruptible, fn, *args) for args in group]
        try:
            for future in as_completed(futures):
                on_result(future.result())
        except BaseException:
            for future in futures:
                future.cancel()
            for child in multiprocessing.active_children():  # the running jobs stop now
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid or 0, signal.SIGINT)
            raise
