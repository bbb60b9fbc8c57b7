"""What an engine core is: the in-process engine the virtual clock drives, as a protocol.

A core takes requests (`add_request`, `abort`), runs its scheduler forward on engine time
(`advance` to a time, returning early when a request finishes), and says what it holds
(`has_work`, `output_tokens`, `request_info`, `reply_words`), its counters (`stats`, the
figures a `/metrics` page would show) and its scheduler's state for forensics (`debug_state`).
It does no I/O and keeps no clock: the caller passes engine time to every call. The
simulator's core (`stallkit.engine.sim.core.SimEngine`) is one; the twin (`stallkit.engine.twin.core.TwinEngine`,
vLLM's own scheduler driven with no model) is another with the same methods, never another
driver. A `SteppedCore` also steps one at a time, for the HTTP front.

The records a core hands out are the simulator's (`stallkit.engine.core.records`), re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from stallkit.contract.scheduler_state import SimState
from stallkit.engine.core.records import AdvanceResult, EngineStats, RequestInfo, StepResult

__all__ = ["AdvanceResult", "EngineCore", "EngineStats", "RequestInfo", "SteppedCore"]


class EngineCore(Protocol):
    """An engine driven in process on engine time (deterministic given the calls)."""

    @property
    def num_gpus(self) -> int:
        """GPUs the engine's utilisation is reported for."""
        ...

    def add_request(
        self,
        request_id: str,
        prompt: Sequence[str],
        max_tokens: int,
        now_s: float,
        *,
        continues: str | None = None,
    ) -> None:
        """Queue a request of prompt tokens; raises an `EngineError` when it refuses it.

        `continues` names a finished request whose prompt and reply this prompt begins with.
        """
        ...

    def abort(self, request_id: str, now_s: float) -> None:
        """Drop a waiting or running request; unknown ids are ignored."""
        ...

    def advance(self, now_s: float, until_s: float) -> AdvanceResult:
        """Run from `now_s` while work remains until `until_s` or a request finishes."""
        ...

    def has_work(self) -> bool:
        """Whether anything is running or waiting."""
        ...

    def output_tokens(self, request_id: str) -> int | None:
        """Output tokens of a live or recently finished request so far (None: unknown)."""
        ...

    def request_info(self, request_id: str) -> RequestInfo | None:
        """A live or recently finished request; None when unknown."""
        ...

    def reply_words(self, request_id: str, count: int) -> list[str]:
        """The first `count` words of a request's reply, as a client would have read them."""
        ...

    def debug_state(self, now_s: float) -> SimState:
        """The scheduler's state at `now_s`, for a forensics bundle."""
        ...

    @property
    def stats(self) -> EngineStats:
        """The counters and gauges now."""
        ...


class SteppedCore(EngineCore, Protocol):
    """A core the HTTP front drives step by step on the wall clock (`kit sim serve`)."""

    def step(self, now_s: float) -> StepResult:
        """Run one scheduler step starting at `now_s` (its outputs and finishes)."""
        ...

    def debug_state(self, now_s: float, frozen: bool = False) -> SimState:
        """The scheduler's state at `now_s`; `frozen` as the front reports it."""
        ...
