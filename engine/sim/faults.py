"""Fault injection: the simulator plays each kind of stall on demand, on either clock.

A `Fault` names what goes wrong and the engine time it strikes (`at_s`); `FaultyCore` wraps
the simulator's core and, from that time on, plays it:

| fault | what the engine does from `at_s` | the stall it plays |
| --- | --- | --- |
| `freeze` | stops: no step, counters and gauges stay put | frozen |
| `block` | queues a request longer than the KV pool at the head of the queue | blocked |
| `thrash` | preempts every request before its next token, forever | thrashing |
| `busy_hang` | stops stepping with its GPUs busy (a collective hang) | busy_hang |
| `dead_core` | its core dies; the server answers without the engine's series | dead_core |
| `hidden_freeze` | stops as `freeze`, its running and waiting gauges read 0 | frozen (hidden) |

A hidden freeze is the wedge whose gauges say idle: the engine's own page shows nothing
pending, so only the clients, which wait on what they sent, can see the stall.

A stopped core (freeze, hidden freeze, busy hang, dead core) never sees a request sent after the strike nor
an abort: the server accepts them and nothing comes back. Pure: time comes from the calls,
so the virtual clock and the HTTP driver play the same fault at the same engine time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import get_args

from stallkit.contract.scheduler_state import SimState
from stallkit.contract.timeline import StallKind
from stallkit.engine.core.records import AdvanceResult, EngineStats, RequestInfo, StepResult
from stallkit.engine.errors import EngineError
from stallkit.engine.sim.config import Fault, FaultKind
from stallkit.engine.sim.core import SimEngine

#: faults after which the core takes no step
_STOPPING: frozenset[FaultKind] = frozenset({"freeze", "busy_hang", "dead_core", "hidden_freeze"})
_SPEC = re.compile(r"^(?P<kind>[a-z_]+)@(?P<at>[0-9]+(?:\.[0-9]*)?)$")
KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
#: the stall kind each fault plays, as the monitor names it
PLAYS: dict[FaultKind, StallKind] = {
    "freeze": "frozen",
    "block": "blocked",
    "thrash": "thrashing",
    "busy_hang": "busy_hang",
    "dead_core": "dead_core",
    "hidden_freeze": "frozen",
}


def parse_fault(text: str) -> Fault:
    """`KIND@SECONDS` (e.g. `block@600`) as a `Fault`; an `EngineError` names what is wrong."""
    match = _SPEC.match(text.strip())
    if match is None or match["kind"] not in KINDS:
        raise EngineError(
            f"fault {text!r} is not KIND@SECONDS", f"KIND is one of {', '.join(KINDS)}"
        )
    return Fault.model_validate({"kind": match["kind"], "at_s": float(match["at"])})


class FaultyCore:
    """The simulator's core with a fault that strikes at `fault.at_s` (engine seconds)."""

    def __init__(self, core: SimEngine, fault: Fault) -> None:
        self._core = core
        self.fault = fault
        self.config = core.config
        self._struck_s: float | None = None
        self._held: EngineStats | None = None  # the counters as the core stopped
        self._now_s = 0.0

    @property
    def stopped(self) -> bool:
        """Whether the core has stopped stepping for good."""
        return self._held is not None

    def _strike(self, now_s: float) -> None:
        self._now_s = max(self._now_s, now_s)
        if self._struck_s is not None or now_s < self.fault.at_s:
            return
        self._struck_s = now_s
        kind = self.fault.kind
        if kind == "block":
            self._core.add_blocker("fault-blocker", now_s)
        elif kind == "thrash":
            self._core.start_thrashing()
        elif kind in _STOPPING:
            self._held = self._core.stats

    # -- requests ---------------------------------------------------------------------------
    def add_request(
        self,
        request_id: str,
        prompt: Sequence[str],
        max_tokens: int,
        now_s: float,
        *,
        continues: str | None = None,
    ) -> None:
        """Queue a request; a stopped core never sees it (nothing comes back)."""
        self._strike(now_s)
        if not self.stopped:
            self._core.add_request(request_id, prompt, max_tokens, now_s, continues=continues)

    def abort(self, request_id: str, now_s: float) -> None:
        """Abort a request; a stopped core ignores it."""
        self._strike(now_s)
        if not self.stopped:
            self._core.abort(request_id, now_s)

    # -- time -------------------------------------------------------------------------------
    def step(self, now_s: float) -> StepResult:
        """One step; a stopped core's is an idle tick (its GPUs busy in a busy hang)."""
        self._strike(now_s)
        if not self.stopped:
            return self._core.step(now_s)
        busy = self.fault.kind == "busy_hang"
        held = self._held
        assert held is not None
        return StepResult(
            duration_s=self.config.idle_tick_s,
            turn="none",
            scheduled_tokens=0,
            prefill_tokens=0,
            decode_tokens=0,
            preemptions=0,
            restores_polled=0,
            kv_usage=held.kv_usage,
            gpu_busy=busy,
            vruntime_prefill=held.vruntime_prefill,
            vruntime_decode=held.vruntime_decode,
            outputs={},
            finished={},
        )

    def advance(self, now_s: float, until_s: float, max_steps: int = 1_000_000) -> AdvanceResult:
        """Run to `until_s`, stopping at the strike to play the fault from there on."""
        self._strike(now_s)
        if not self.stopped and self._struck_s is None and until_s > self.fault.at_s:
            # run up to the strike, then play the fault from there
            result = self._core.advance(now_s, self.fault.at_s, max_steps)
            if result.now_s < self.fault.at_s or result.finished:
                return result
            now_s = result.now_s
            self._strike(now_s)
        if not self.stopped:
            return self._core.advance(now_s, until_s, max_steps)
        self._now_s = max(self._now_s, until_s)
        busy = until_s if self.fault.kind == "busy_hang" else None
        return AdvanceResult(until_s, 0, 0, 0, None, busy)

    def has_work(self) -> bool:
        """Whether the core will step: a frozen or dead one will not, though the requests it
        held are still pending on its page; a busy hang keeps ticking (its GPUs busy)."""
        if self.stopped:  # a hung collective keeps the GPUs busy: the driver keeps ticking
            return self.fault.kind == "busy_hang"
        return self._core.has_work()

    # -- what it shows ----------------------------------------------------------------------
    @property
    def stats(self) -> EngineStats:
        """The counters: a stopped core's as they were at the strike (a busy hang's GPU busy
        time grows on, a dead core's say it is not alive, a hidden freeze's gauges read no
        request running or waiting)."""
        held = self._held
        if held is None:
            return self._core.stats
        busy_s = held.busy_s
        if self.fault.kind == "busy_hang" and self._struck_s is not None:
            busy_s += max(0.0, self._now_s - self._struck_s)
        if self.fault.kind == "hidden_freeze":
            held = replace(held, num_running=0, num_waiting=0, waiting_by_reason={})
        return replace(
            held,
            now_s=self._now_s,
            busy_s=busy_s,
            gpu_busy=self.fault.kind == "busy_hang",
            core_alive=self.fault.kind != "dead_core",
        )

    @property
    def num_gpus(self) -> int:
        """The wrapped core's GPUs."""
        return self._core.num_gpus

    def output_tokens(self, request_id: str) -> int | None:
        """As the wrapped core."""
        return self._core.output_tokens(request_id)

    def request_info(self, request_id: str) -> RequestInfo | None:
        """As the wrapped core."""
        return self._core.request_info(request_id)

    def reply_words(self, request_id: str, count: int) -> list[str]:
        """As the wrapped core."""
        return self._core.reply_words(request_id, count)

    def debug_state(self, now_s: float, frozen: bool = False) -> SimState:
        """The wrapped core's state, `frozen` once it stopped."""
        return self._core.debug_state(now_s, frozen or self.stopped)


def with_fault(core: SimEngine, fault: Fault | None) -> SimEngine | FaultyCore:
    """The core, wrapped to play `fault` when there is one."""
    return core if fault is None else FaultyCore(core, fault)
