"""The twin's async scheduling: vLLM's batch queue on engine time (step N+1 before N's output).

vLLM 0.32 with async scheduling builds `AsyncScheduler` (config/scheduler.py:228-236, or the
`--scheduler-cls` as given) and a batch queue of `max_concurrent_batches` = 2 batches
(config/vllm.py:577-587, v1/engine/core.py:220-244), and its engine loop calls
`EngineCore.step_with_batch_queue` (v1/engine/core.py:698-812) over and over. One call:

1. if `scheduler.has_requests()`: `schedule()` (core.py:724-725), the batch is handed to the
   executor without waiting (727-729) and put on the queue (753); the scheduler's
   `_update_after_schedule` has already counted the batch's tokens as computed, and
   `AsyncScheduler._update_after_schedule` (async_scheduler.py:25-57) adds one output
   placeholder per decoding request, so the next `schedule()` decodes it again without its
   token; if the queue is not full and the batch ran work or requests remain, the call
   returns with no output (754-759);
2. otherwise, with the queue empty, it returns nothing (761-765);
3. it blocks on the oldest batch (768-773), applies aborts (782) and then
   `scheduler.update_from_output(oldest, its output)` (783-785), where
   `AsyncScheduler._update_request_with_output` (async_scheduler.py:59-78) takes the
   placeholders back and caches the blocks; a request finished there is freed there, while a
   later batch already scheduled still names it (its output is dropped as stale,
   scheduler.py:2096-2099).

The twin makes those calls in that order on the virtual clock. A twin step is the calls up to
one `update_from_output` (a call that returns without output costs no engine time). The
batches run back to back on one device: a batch starts when it is scheduled onto an idle
device or when the batch before it ends, and lasts what the cost model says (`empty_step_s`
for an empty one: the loop's overhead); the KV connector's worker calls for a batch run at its
start and end, in batch order. The step ends when the oldest batch ends (at once when it
already has): its outputs are the ones applied, its work the step's. The structured-output
deferral of sampling (core.py:737-749, 792-810) has no counterpart: the twin has no grammar.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from stallkit.engine.core.records import StepResult, output_words

if TYPE_CHECKING:
    from collections import OrderedDict

    from stallkit.engine.sim.stats import Counters
    from stallkit.engine.twin.config import TwinConfig
    from stallkit.engine.twin.state import TwinRequest
    from stallkit.engine.twin.tokens import TokenMap


class TwinEngine(Protocol):
    """What the batch queue steps: the twin engine's state it shares with the one-output
    stepping (`stallkit.engine.twin.core.TwinEngine`, which owns the queue: named here by
    shape, so the two modules do not import each other)."""

    config: TwinConfig
    _sched: Any
    _c: Counters
    _reqs: OrderedDict[str, TwinRequest]
    _kv: Any
    _now: float
    _indexed: bool
    _output_cls: Any
    _tokens: TokenMap
    _gpu_busy: bool

    def _count_prefix_stats(self) -> None: ...

    def _turn(self) -> tuple[str, float, float]: ...

    def record_step(
        self,
        out: Any,
        engine_outputs: Any,
        *,
        scheduled: int,
        prefill_tokens: int,
        decode_tokens: int,
        duration_s: float,
        busy_s: float,
        end_s: float,
        detail: bool,
    ) -> StepResult: ...


__all__ = ["BatchQueue"]

#: vLLM's max_concurrent_batches with async scheduling, no pipeline parallelism
_QUEUE_SIZE = 2


@dataclass
class _Batch:
    """One scheduled batch: vLLM's scheduler output and the work the twin derived from it."""

    out: Any
    ids: list[str]
    prefills: list[tuple[int, int]]
    decodes: list[int]
    sampled: list[list[int]]
    start_s: float | None = None
    end_s: float = 0.0

    @property
    def scheduled(self) -> int:
        return int(self.out.total_num_scheduled_tokens)


class BatchQueue:
    """`EngineCore.step_with_batch_queue` for a twin engine whose scheduler is async."""

    def __init__(self, engine: TwinEngine) -> None:
        self.engine = engine
        self._queue: deque[_Batch] = deque()

    def step(self, now_s: float, detail: bool) -> StepResult:
        """The batch-queue calls from engine time `now_s` up to one output applied."""
        engine, queue = self.engine, self._queue
        sched = engine._sched
        while True:
            if sched.has_requests():
                batch = self._schedule(now_s)
                if not queue:
                    self._launch(batch, now_s)
                queue.appendleft(batch)
                if len(queue) < _QUEUE_SIZE and (batch.scheduled or sched.has_requests()):
                    continue  # vLLM returns without output; its next call schedules again
            elif not queue:
                return self._idle(now_s)
            return self._land(queue.pop(), now_s, detail)

    def shift(self, seconds: float) -> None:
        """Empty steps were skipped (`TwinEngine._skip`): the batches in flight move with them."""
        for batch in self._queue:
            if batch.start_s is not None:
                batch.start_s += seconds
                batch.end_s += seconds

    def _schedule(self, now_s: float) -> _Batch:
        engine = self.engine
        engine._now = now_s
        out = engine._sched.schedule()
        engine._count_prefix_stats()
        for new in out.scheduled_new_reqs:
            req = engine._reqs.get(new.req_id)
            if req is not None and req.first_scheduled_s is None:
                req.first_scheduled_s, req.cached = now_s, int(new.num_computed_tokens)
        ids = list(out.num_scheduled_tokens)
        return _Batch(out, ids, *self._work(out, ids))

    def _work(
        self, out: Any, ids: list[str]
    ) -> tuple[list[tuple[int, int]], list[int], list[list[int]]]:
        """As `TwinEngine._work`, but the sampled token is the reply word after those already
        applied and those still in flight (vLLM's output placeholders, this batch's included)."""
        engine = self.engine
        requests = engine._sched.requests
        prefills: list[tuple[int, int]] = []
        decodes: list[int] = []
        sampled: list[list[int]] = []
        for rid in ids:
            n = out.num_scheduled_tokens[rid]
            request = requests[rid]
            before = request.num_computed_tokens - n
            if n == 1 and before >= request.num_tokens - 1:
                decodes.append(before)
            else:
                prefills.append((n, before))
            if request.num_computed_tokens >= request.num_tokens:
                index = request.num_output_tokens + max(0, request.num_output_placeholders - 1)
                word = output_words(rid, index, 1)[0]
                sampled.append([engine._tokens.id_of(word)])
            else:
                sampled.append([])
        return prefills, decodes, sampled

    def _launch(self, batch: _Batch, start_s: float) -> None:
        """The batch starts on the device at `start_s`: the connector's calls before its
        forward, and its end from the cost model."""
        engine = self.engine
        config = engine.config
        if batch.scheduled:
            duration = config.cost.step_s(batch.prefills, batch.decodes)
        else:
            duration = config.empty_step_s
        if engine._kv is not None:
            duration += engine._kv.begin(batch.out, start_s)
        batch.start_s, batch.end_s = start_s, start_s + duration

    def _land(self, batch: _Batch, now_s: float, detail: bool) -> StepResult:
        """Wait for the oldest batch, apply its output, start the next one on the device."""
        engine, c = self.engine, self.engine._c
        end_s = max(now_s, batch.end_s)
        engine._now = end_s
        index: dict[str, Any] = {}
        if engine._indexed:
            index["req_id_to_index"] = {r: i for i, r in enumerate(batch.ids)}
        runner = engine._output_cls(req_ids=batch.ids, sampled_token_ids=batch.sampled, **index)
        if engine._kv is not None:
            runner.kv_connector_output = engine._kv.end(batch.out, end_s)
            c.restores_done += len(runner.kv_connector_output.finished_recving or ())
        engine_outputs = engine._sched.update_from_output(batch.out, runner)
        if self._queue:
            self._launch(self._queue[-1], end_s)
        return self._result(batch, engine_outputs, now_s, end_s, detail)

    def _result(
        self, batch: _Batch, engine_outputs: Any, now_s: float, end_s: float, detail: bool
    ) -> StepResult:
        return self.engine.record_step(
            batch.out, engine_outputs, scheduled=batch.scheduled,
            prefill_tokens=sum(tokens for tokens, _ in batch.prefills),
            decode_tokens=len(batch.decodes), duration_s=end_s - now_s,
            busy_s=batch.end_s - (batch.start_s or 0.0), end_s=end_s, detail=detail,
        )  # fmt: skip

    def _idle(self, now_s: float) -> StepResult:
        """Nothing to schedule, nothing in flight: the loop's overhead passes."""
        engine = self.engine
        engine._now = now_s + engine.config.empty_step_s
        engine._c.steps += 1
        engine._c.empty_steps += 1
        engine._gpu_busy = False
        turn, vp, vd = engine._turn()
        return StepResult(
            duration_s=engine.config.empty_step_s,
            turn=turn,
            scheduled_tokens=0,
            prefill_tokens=0,
            decode_tokens=0,
            preemptions=0,
            restores_polled=0,
            kv_usage=0.0,
            gpu_busy=False,
            vruntime_prefill=vp,
            vruntime_decode=vd,
            outputs={},
            finished={},
        )
