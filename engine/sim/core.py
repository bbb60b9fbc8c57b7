"""The simulated engine's public core: `SimEngine` and the records it hands out.

Pure: no I/O, no clock. The caller passes engine time (`now_s`) to every call and advances its
clock by each step's `duration_s`. The HTTP front, the trace and the virtual-clock driver all
drive this one class (to the virtual clock it is an `stallkit.engine.core.protocol.EngineCore`); the scheduling
itself lives in `stallkit.engine.sim.scheduler`, the records it hands out in `stallkit.engine.core.records`
(re-exported here).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from stallkit.contract.scheduler_state import SimState
from stallkit.engine.core.records import (
    ITERATION_TOKEN_BOUNDS,
    VOCABULARY,
    AdvanceResult,
    EngineStats,
    HistogramSnapshot,
    RequestInfo,
    SimRequestError,
    StepResult,
    output_words,
)
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.scheduler import Scheduler

__all__ = [
    "ITERATION_TOKEN_BOUNDS",
    "VOCABULARY",
    "AdvanceResult",
    "EngineStats",
    "HistogramSnapshot",
    "RequestInfo",
    "SimEngine",
    "SimRequestError",
    "StepResult",
    "output_words",
]


class SimEngine:
    """One simulated engine: running slots, KV pool, prefix cache, host tier, controller.

    Drive it with `add_request` / `abort` and repeated `step(now_s)` calls, advancing engine
    time by each result's `duration_s`. Everything is deterministic given the calls.
    """

    def __init__(self, config: SimConfig, logger: logging.Logger | None = None) -> None:
        self.config = config
        self._sched = Scheduler(config, logger or logging.getLogger("stallkit.engine.sim"))

    def add_request(
        self,
        request_id: str,
        prompt: Sequence[str],
        max_tokens: int,
        now_s: float,
        *,
        continues: str | None = None,
    ) -> None:
        """Queue a request (prompt = its tokens) at the tail of the waiting queue.

        Raises `SimRequestError` for an empty prompt, a prompt longer than `max_model_len` or
        the whole KV pool, `max_tokens < 1`, or an id already in use. The output stops at
        `max_tokens` words or at the engine's longest request, finish reason `length`.
        `continues` names a recently finished request whose prompt and output this prompt
        begins with (the next turn of a conversation): its block hashes are reused instead of
        hashing the whole prompt again. Only the last shared block is checked.
        """
        self._sched.add(request_id, prompt, max_tokens, now_s, continues)

    def abort(self, request_id: str, now_s: float) -> None:
        """Drop a waiting or running request (finish reason `abort`); unknown ids are ignored."""
        self._sched.abort(request_id, now_s)

    def step(self, now_s: float) -> StepResult:
        """Run one scheduler step starting at engine time `now_s`."""
        return self._sched.step(now_s)

    def advance(self, now_s: float, until_s: float, max_steps: int = 1_000_000) -> AdvanceResult:
        """Run steps from `now_s` while work remains, until engine time reaches `until_s`.

        The lean path for drivers that do not need per-step results (the virtual-clock
        workload, benchmarks): same scheduling as `step`, less bookkeeping. Returns early
        when a request finishes or nothing is left to do.
        """
        return self._sched.advance(now_s, until_s, max_steps)

    def has_work(self) -> bool:
        """Whether anything is running or waiting."""
        return self._sched.has_work()

    def add_blocker(self, request_id: str, now_s: float) -> None:
        """Fault `block`: a request longer than the KV pool, at the head of the queue for good."""
        self._sched.add_blocker(request_id, now_s)

    def start_thrashing(self) -> None:
        """Fault `thrash`: from now on every request is preempted before its next token."""
        self._sched.thrash = True

    def output_tokens(self, request_id: str) -> int | None:
        """Output tokens of a live or recently finished request so far (cheaper than its info)."""
        return self._sched.output_tokens(request_id)

    def request_info(self, request_id: str) -> RequestInfo | None:
        """A live or recently finished request; None when unknown (or long forgotten)."""
        return self._sched.info(request_id)

    def reply_words(self, request_id: str, count: int) -> list[str]:
        """The first `count` words of a request's reply (deterministic per request id)."""
        return output_words(request_id, 0, count)

    @property
    def num_gpus(self) -> int:
        """GPUs the simulated utilisation is reported for."""
        return self.config.num_gpus

    def debug_state(self, now_s: float, frozen: bool = False) -> SimState:
        """The scheduler's state (turn clocks, pool, queues with reasons), for forensics."""
        return SimState.model_validate(
            {"engine_time_s": now_s, "frozen": frozen, **self._sched.describe()}
        )

    @property
    def stats(self) -> EngineStats:
        """A snapshot of the counters and gauges."""
        return self._sched.snapshot()
