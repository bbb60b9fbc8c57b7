"""`stallkit.kits.workers`: which worker a virtual-clock run lands in, with real worker processes.

A twin's worker is spawned and quiets vLLM's logging before anything imports it (it sets
`VLLM_CONFIGURE_LOGGING=0` in its own environment), which tells the workers apart here
without importing vLLM: plain runs share the twins' pool when one exists, run in forked
workers when none does, and in this process when there is one job and no twin.
"""

from __future__ import annotations

import os

import pytest

from stallkit.kits.workers import Pools, WorkerKind, run_pooled

PLAIN, TWIN = WorkerKind(), WorkerKind(twin=True)
FLAG = "VLLM_CONFIGURE_LOGGING"


def test_plain_runs_share_a_twin_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FLAG, raising=False)
    got: list[str | None] = []
    run_pooled(os.getenv, [(TWIN, (FLAG,)), *[(PLAIN, (FLAG,))] * 3], got.append, 2)
    assert got == ["0"] * 4  # every run in a twin's (spawned, quiet) worker


def test_plain_runs_go_to_forked_workers_or_stay_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FLAG, raising=False)
    pids: list[int] = []
    run_pooled(os.getpid, [(PLAIN, ())] * 6, pids.append, 2)
    assert len(pids) == 6 and os.getpid() not in pids and len(set(pids)) <= 2
    flags: list[str | None] = []
    run_pooled(os.getenv, [(PLAIN, (FLAG,))] * 2, flags.append, 2)
    assert flags == [None, None]  # not a twin's worker
    here: list[int] = []
    run_pooled(os.getpid, [(PLAIN, ())], here.append, 2)
    assert here == [os.getpid()]


def test_pools_keep_their_workers_across_calls() -> None:
    pids: list[int] = []
    with Pools(1, [TWIN]) as pools:
        for _ in range(3):  # a hunt's batches: one spawned worker serves them all
            pools.run(os.getpid, [(TWIN, ())], pids.append)
    assert len(set(pids)) == 1 and pids[0] != os.getpid()
