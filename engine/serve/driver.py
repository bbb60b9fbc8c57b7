"""Runs the pure simulator core on engine time inside the server's event loop.

Engine time is `time_scale` times the wall clock since start. The driver runs scheduler
steps back to back, advancing the engine clock by each step's `duration_s`; once the engine
has caught up with the wall clock it sleeps for a short tick, so tokens reach clients at
about their engine time and several per SSE chunk when the engine runs ahead of the wire.
While catching up it yields to the event loop every few milliseconds of CPU so HTTP keeps
flowing. Each step's new words go to per-request streams; the per-step work is proportional
to the requests that produced output, never to prompt length. A fault in the config
(`stallkit.engine.sim.faults`: freeze, block, thrash, busy hang, dead core) is played by the core at
its engine time; the HTTP layer leaves it alone (a stopped core's streams stay open).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable

from stallkit.engine.core.protocol import SteppedCore
from stallkit.engine.serve.metrics import SimMetrics
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.core import SimEngine, StepResult
from stallkit.engine.sim.faults import with_fault

log = logging.getLogger("stallkit.engine.sim")

#: Wall seconds slept once the engine has caught up with the wall clock (delivery quantum).
TICK_S = 0.01
#: CPU seconds the driver may run steps before yielding to the event loop.
YIELD_EVERY_S = 0.004
#: Wall seconds of lag behind the wall clock after which the driver warns (once).
LAG_WARN_S = 5.0
#: Wall seconds between two turns of the driver's loop, past what it asked to sleep, that
#: mean the process was stopped (SIGSTOP, a suspended terminal job), not slow: a turn takes
#: at most a few milliseconds of CPU plus its sleep, and even a machine starved of CPU
#: schedules it many times a second.
PAUSE_S = 2.0


class PauseWatch:
    """Tells a stopped process from a slow one, from the wall time between the loop's turns.

    `beat(asked_s)` at each turn, with what the turn asked to sleep: the wall seconds past
    that since the previous beat, when more than `PAUSE_S` (the process did not run then),
    else None. `owed_s` is what the pauses put the simulator behind its clock, until it has
    caught up (`caught_up()`): lag that lowering the time scale would not cure.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = clock()
        self.owed_s = 0.0

    def beat(self, asked_s: float = 0.0) -> float | None:
        now = self._clock()
        gap = now - self._last - max(asked_s, 0.0)
        self._last = now
        if gap <= PAUSE_S:
            return None
        self.owed_s += gap
        return gap

    def caught_up(self) -> None:
        self.owed_s = 0.0


class RequestStream:
    """New words of one request, filled by the driver and drained by its HTTP handler."""

    __slots__ = ("_event", "finish_reason", "request_id", "words")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.words: list[str] = []
        self.finish_reason: str | None = None
        self._event = asyncio.Event()

    def push(self, words: list[str]) -> None:
        self.words.extend(words)
        self._event.set()

    def finish(self, reason: str) -> None:
        self.finish_reason = reason
        self._event.set()

    async def next_batch(self) -> tuple[list[str], str | None]:
        """Wait for new words or the end; return the words not yet taken and the finish reason."""
        while not self.words and self.finish_reason is None:
            self._event.clear()
            await self._event.wait()
        words, self.words = self.words, []
        return words, self.finish_reason


class EngineDriver:
    """Owns an engine core (a `SimEngine` unless given another), its engine clock, and the
    streams of the requests in flight."""

    def __init__(
        self,
        config: SimConfig,
        time_scale: float = 1.0,
        logger: logging.Logger | None = None,
        core: SteppedCore | None = None,
    ) -> None:
        self.config = config
        self.time_scale = time_scale
        # the simulator's core (playing the config's fault), or another one (the twin)
        self.engine: SteppedCore = (
            with_fault(SimEngine(config, logger or log), config.fault) if core is None else core
        )
        self.metrics = SimMetrics(config, time_scale, step_counter=core is not None)
        #: longest request (prompt plus output) the front lets through: the simulator's cap
        #: (its pool too), or for a twin vLLM's (max_model_len only; its engine checks the rest)
        self.longest_request = config.max_request_tokens if core is None else config.max_model_len
        self.sim_now = 0.0
        self._wall0 = time.monotonic()
        self._busy = False
        self._lag_warned = False
        self._pauses = PauseWatch()
        self._ids = itertools.count()
        self._streams: dict[str, RequestStream] = {}
        self._pending: list[tuple[RequestStream, list[str] | str]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- clocks -----------------------------------------------------------------------------
    def wall_engine_s(self) -> float:
        """Engine seconds the wall clock says have passed since start."""
        return (time.monotonic() - self._wall0) * self.time_scale

    def now(self) -> float:
        """The engine's current time: its own clock while stepping, else the wall's."""
        if self._busy:
            return self.sim_now
        return max(self.sim_now, self.wall_engine_s())

    # -- requests ---------------------------------------------------------------------------
    def submit(self, prompt: list[str], max_tokens: int) -> RequestStream:
        """Queue a request (a stopped core never sees it); raises SimRequestError if refused."""
        request_id = f"req-{next(self._ids)}"
        stream = RequestStream(request_id)
        now = self.now()
        self.engine.add_request(request_id, prompt, max_tokens, now_s=now)
        self._streams[request_id] = stream
        self.metrics.on_added(request_id, now, max_tokens)
        if not self._busy:
            self.sim_now = now
        self._wake.set()
        return stream

    def abort(self, request_id: str) -> None:
        """The client went away: abort the request in the engine (a stopped core ignores it)."""
        if request_id not in self._streams:
            return
        now = self.now()
        self.engine.abort(request_id, now_s=now)
        self._finish(request_id, "abort", now)
        self._wake.set()

    def request_info_usage(self, request_id: str) -> tuple[int, int, int]:
        """(prompt tokens, completion tokens, cached prompt tokens) of a request."""
        info = self.engine.request_info(request_id)
        if info is None:
            return 0, 0, 0
        return info.prompt_tokens, info.output_tokens, info.cached_prompt_tokens

    def _finish(self, request_id: str, reason: str, now: float) -> None:
        stream = self._streams.pop(request_id, None)
        if stream is None:
            return
        self.metrics.on_finished(request_id, reason, self.engine.request_info(request_id), now)
        stream.finish(reason)

    # -- the loop ---------------------------------------------------------------------------
    def start(self) -> None:
        self._wall0 = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        """Stop stepping and end every open stream (finish reason `abort`) so none hangs."""
        for stream in self._streams.values():
            stream.finish("abort")
        self._streams.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _apply(self, result: StepResult, start_s: float) -> None:
        end_s = start_s + result.duration_s
        self.metrics.on_step(result, start_s, end_s)
        streams = self._streams
        pending = self._pending
        for request_id, words in result.outputs.items():
            stream = streams.get(request_id)
            if stream is not None and words:
                self.metrics.on_tokens(request_id, len(words), end_s)
                pending.append((stream, words))
        for request_id, reason in result.finished.items():
            stream = streams.pop(request_id, None)
            if stream is not None:
                info = self.engine.request_info(request_id)
                self.metrics.on_finished(request_id, reason, info, end_s)
                pending.append((stream, reason))

    def _flush(self) -> None:
        """Hand buffered outputs to their streams (words first, then the finish)."""
        pending, self._pending = self._pending, []
        for stream, item in pending:
            if isinstance(item, str):
                stream.finish(item)
            else:
                stream.push(item)

    def _note_pause(self, asked_s: float) -> None:
        paused_s = self._pauses.beat(asked_s)
        if paused_s is not None:
            log.warning(
                "simulator was stopped for %.1f wall s (its process paused, e.g. SIGSTOP); "
                "it is that far behind its clock and catches up",
                paused_s,
            )

    def _warn_lag(self, lag_s: float) -> None:
        """Warn once when the simulator falls behind its clock by more than the pauses put it."""
        if lag_s - self._pauses.owed_s > LAG_WARN_S and not self._lag_warned:
            self._lag_warned = True
            log.warning(
                "simulator is %.1f wall seconds behind its clock; lower --time-scale", lag_s
            )

    async def _wait_for_work(self) -> None:
        self._busy = False
        while not self.engine.has_work():
            self._wake.clear()
            await self._wake.wait()
        self._busy = True
        self.sim_now = max(self.sim_now, self.wall_engine_s())

    async def _run(self) -> None:
        engine = self.engine
        cpu_mark = time.perf_counter()
        asked_s = 0.0  # what the previous turn slept for
        while True:
            self._note_pause(asked_s)
            asked_s = 0.0
            has_work = engine.has_work()
            if not has_work and not self._pending:
                await self._wait_for_work()
                self._pauses.beat(float("inf"))  # an idle wait is no pause
                has_work = True
                cpu_mark = time.perf_counter()
            lead_s = (self.sim_now - self.wall_engine_s()) / self.time_scale
            if lead_s >= 0 or not has_work:
                self._pauses.caught_up()
                # Outputs are known at the end of their step: deliver once the wall gets there.
                asked_s = max(lead_s, TICK_S if has_work else 0.0)
                await asyncio.sleep(asked_s)
                self._flush()
                cpu_mark = time.perf_counter()
                continue
            self._warn_lag(-lead_s)
            start_s = self.sim_now
            result = engine.step(start_s)
            self.sim_now = start_s + result.duration_s
            self._apply(result, start_s)
            if time.perf_counter() - cpu_mark > YIELD_EVERY_S:
                self._flush()
                await asyncio.sleep(0)
                cpu_mark = time.perf_counter()
