"""The twin's engine core: vLLM's own scheduler stepped on engine time, with no model.

Each step is what vLLM's engine core does around a model: `schedule()`, then
`update_from_output()` with one sampled token for every request whose scheduled tokens reached
its end (the token of the request's next reply word, so a conversation's next turn finds its
reply in the prefix cache; EOS never, the reply ends at `max_tokens`). The step's engine time
comes from the cost model over what the scheduler decided (prefill chunks with their context,
decode sequences with theirs); an empty step costs the engine loop's overhead. After an empty
step that left the scheduler's state as the one before it (same requests, same computed tokens,
same free blocks, same scalar state of the scheduler and its controller), the next steps would
be the same: `advance` skips them to its horizon, counting each one, which is the signature a
livelock leaves. Implements `stallkit.engine.core.protocol.EngineCore`, plus `step` for the HTTP front.
With async scheduling on, a step is vLLM's batch queue's (`stallkit.engine.twin.batchqueue`).

With a `kv_transfer_config`, the scheduler runs that KV connector (vLLM's own code) and each
step makes the model runner's connector calls around it (`stallkit.engine.twin.kv.driver`): its
transfers move on engine time, their completions ride on the step's `kv_connector_output`, and
the empty-step skip stops short of the next completion instead of running to its horizon.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from stallkit.contract.scheduler_state import SimState
from stallkit.engine.core.records import (
    AdvanceResult,
    EngineStats,
    RequestInfo,
    StepResult,
    check_request_id,
    output_words,
)
from stallkit.engine.sim.stats import Counters
from stallkit.engine.twin.batchqueue import BatchQueue
from stallkit.engine.twin.build import kv_cache_usage, make_scheduler, route_vllm_logging
from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.frontdoor import FrontDoor
from stallkit.engine.twin.state import TwinRequest, engine_stats, scheduler_state
from stallkit.engine.twin.tokens import TokenMap

__all__ = ["TwinEngine"]

#: scheduler attributes that move every step whatever it decides (not part of its state)
_PER_STEP = frozenset({"current_step", "_last_update_s"})
#: finished requests remembered for their info (the driver asks after they finish)
_KEEP_FINISHED = 4096


def _parked_queues(sched: Any) -> tuple[Any, ...]:
    """The waiting queues beside `waiting` that hold requests across steps: 0.32's
    `kv_holding_waiting`, or 0.22's and 0.23's `skipped_waiting` (loads in flight among them)."""
    names = ("kv_holding_waiting", "skipped_waiting")
    return tuple(getattr(sched, name) for name in names if hasattr(sched, name))


class TwinEngine:
    """vLLM's scheduler class of `config` over the twin's pool, driven on engine time."""

    def __init__(self, config: TwinConfig, logger: logging.Logger | None = None) -> None:
        self.config = config
        self.log = logger or logging.getLogger("stallkit.engine.twin")
        self._now = 0.0
        route_vllm_logging(self.log)
        self._sched = make_scheduler(config)
        self._door = FrontDoor(self._sched.vllm_config)
        self._kv: Any = None
        if config.kv_transfer_config is not None:  # the connector's worker half, bytes simulated
            from stallkit.engine.twin.kv.driver import KvDriver

            self._kv = KvDriver(
                self._sched,
                config.kv_link_latency_s,
                config.kv_seconds_per_block,
                config.kv_load_fail_every,
            )
        self._batches: BatchQueue | None = BatchQueue(self) if config.async_on else None
        if hasattr(self._sched, "clock"):  # the plugin times its steps with this clock
            self._sched.clock = lambda: self._now
        self._tokens = TokenMap()
        self._reqs: OrderedDict[str, TwinRequest] = OrderedDict()
        self._live: set[str] = set()
        self._c = Counters()
        self._gpu_busy = False
        self._fixed_point: tuple[Any, ...] | None = None
        #: empty steps counted without running them (the state was a fixed point)
        self.skipped_steps = 0
        self._last_empty: tuple[int, int] = (0, 0)  # prefix queries, hits of the last empty step
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request

        self._request_cls, self._output_cls = Request, ModelRunnerOutput
        self._hasher = get_request_block_hasher(config.block_size, sha256)
        # 0.34's ModelRunnerOutput has no req_id_to_index (its scheduler indexes req_ids)
        self._indexed = "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}
        self.log.info(
            "twin engine: %s over %d blocks of %d tokens, %d seqs, %d tokens per step",
            type(self._sched).__name__,
            config.num_blocks,
            config.block_size,
            config.max_num_seqs,
            config.max_num_batched_tokens,
        )

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
        """Queue a request of prompt words; SimRequestError when the engine cannot take it."""
        check_request_id(request_id, self._reqs)
        ids = self._tokens.ids(prompt)  # `continues` is not needed: ids are a function of words
        self._door.check_prompt(ids)  # vLLM's own checks: max_model_len, not the KV pool
        params = self._door.sampling_params(len(prompt), max_tokens)
        max_tokens = params.max_tokens
        request = self._request_cls(
            request_id, ids, params, None, arrival_time=now_s, block_hasher=self._hasher
        )
        self._sched.add_request(request)
        self._reqs[request_id] = TwinRequest(len(prompt), max_tokens, now_s)
        self._live.add(request_id)
        self._fixed_point = None

    def abort(self, request_id: str, now_s: float) -> None:
        """Drop a waiting or running request (finish reason `abort`); unknown ids are ignored."""
        if request_id not in self._live:
            return
        from vllm.v1.request import RequestStatus

        self._sched.finish_requests(request_id, RequestStatus.FINISHED_ABORTED)
        self._finish(request_id, "abort", now_s)
        self._fixed_point = None

    def _finish(self, request_id: str, reason: str, now_s: float) -> None:
        self._live.discard(request_id)
        req = self._reqs[request_id]
        req.finished_s, req.reason = now_s, reason
        self._c.request_success[reason] = self._c.request_success.get(reason, 0) + 1
        self._reqs.move_to_end(request_id)
        if len(self._reqs) - len(self._live) > _KEEP_FINISHED:
            oldest = next(r for r in self._reqs if r not in self._live)
            del self._reqs[oldest]

    # -- steps ------------------------------------------------------------------------------
    def step(self, now_s: float) -> StepResult:
        """Run one scheduler step starting at engine time `now_s`."""
        return self._step(now_s, detail=True)

    def _step(self, now_s: float, detail: bool) -> StepResult:
        if self._batches is not None:  # async scheduling: vLLM's batch queue
            return self._batches.step(now_s, detail)
        sched, cost, c = self._sched, self.config.cost, self._c
        self._now = now_s
        out = sched.schedule()
        self._count_prefix_stats()
        for new in out.scheduled_new_reqs:
            req = self._reqs.get(new.req_id)
            if req is not None and req.first_scheduled_s is None:
                req.first_scheduled_s, req.cached = now_s, int(new.num_computed_tokens)
        ids = list(out.num_scheduled_tokens)
        prefills, decodes, sampled = self._work(out, ids)
        scheduled = out.total_num_scheduled_tokens
        duration = cost.step_s(prefills, decodes) if scheduled else self.config.empty_step_s
        if self._kv is not None:  # a flush the connector asks for holds the forward back
            duration += self._kv.begin(out, now_s)
        prefill_tokens = sum(tokens for tokens, _ in prefills)
        end_s = now_s + duration
        self._now = end_s
        index: dict[str, Any] = {}
        if self._indexed:
            index["req_id_to_index"] = {r: i for i, r in enumerate(ids)}
        runner = self._output_cls(req_ids=ids, sampled_token_ids=sampled, **index)
        if self._kv is not None:
            runner.kv_connector_output = self._kv.end(out, end_s)
            c.restores_done += len(runner.kv_connector_output.finished_recving or ())
        engine_outputs = sched.update_from_output(out, runner)
        return self.record_step(
            out, engine_outputs, scheduled=scheduled, prefill_tokens=prefill_tokens,
            decode_tokens=len(decodes), duration_s=duration, busy_s=duration, end_s=end_s,
            detail=detail,
        )  # fmt: skip

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
    ) -> StepResult:
        """What one applied step did, counted once for either stepping (one output at a time,
        or the batch queue's): preemptions, outputs, the counters and the step's result."""
        c = self._c
        preempted = len(out.preempted_req_ids or ())
        for rid in out.preempted_req_ids or ():
            if rid in self._reqs:
                self._reqs[rid].preemptions += 1
        outputs, finished = self._outputs(engine_outputs, end_s, detail)
        c.steps += 1
        c.num_preemptions += preempted
        self._gpu_busy = scheduled > 0
        if scheduled:
            c.busy_s += busy_s
            c.observe_iteration(scheduled)
        else:
            c.empty_steps += 1
        turn, vp, vd = self._turn()
        return StepResult(
            duration_s=duration_s,
            turn=turn,
            scheduled_tokens=scheduled,
            prefill_tokens=prefill_tokens,
            decode_tokens=decode_tokens,
            preemptions=preempted,
            restores_polled=0,
            kv_usage=kv_cache_usage(self._sched) if detail else 0.0,
            gpu_busy=scheduled > 0,
            vruntime_prefill=vp,
            vruntime_decode=vd,
            outputs=outputs,
            finished=finished,
        )

    def _work(
        self, out: Any, ids: list[str]
    ) -> tuple[list[tuple[int, int]], list[int], list[list[int]]]:
        """A scheduled step's prefill chunks (tokens, context before them), decode contexts,
        and the token each request samples (its next reply word's) if it reached its end."""
        requests = self._sched.requests
        prefills: list[tuple[int, int]] = []
        decodes: list[int] = []
        sampled: list[list[int]] = []
        for rid in ids:
            n = out.num_scheduled_tokens[rid]
            request = requests[rid]
            before = request.num_computed_tokens - n  # vLLM counts this step's tokens already
            if n == 1 and before >= request.num_tokens - 1:
                decodes.append(before)
            else:
                prefills.append((n, before))
            if request.num_computed_tokens >= request.num_tokens:
                word = output_words(rid, self._reqs[rid].words, 1)[0]
                sampled.append([self._tokens.id_of(word)])
            else:
                sampled.append([])
        return prefills, decodes, sampled

    def _outputs(
        self, engine_outputs: Any, end_s: float, detail: bool
    ) -> tuple[dict[str, list[str]], dict[str, str]]:
        outputs: dict[str, list[str]] = {}
        finished: dict[str, str] = {}
        c = self._c
        for client in engine_outputs.values():
            for item in client.outputs:
                rid = item.request_id
                req = self._reqs.get(rid)
                if req is None:
                    continue
                count = len(item.new_token_ids)
                if count:
                    if req.words == 0:
                        req.first_token_s = end_s
                        # vLLM's split of the cached prompt: what a connector loaded
                        stats = getattr(item, "prefill_stats", None)
                        loaded = min(req.cached, getattr(stats, "num_external_cached_tokens", 0))
                        c.count_prompt(req.prompt_tokens, req.cached - loaded, loaded)
                    if detail:
                        outputs[rid] = output_words(rid, req.words, count)
                    req.words += count
                    c.generation_tokens += count
                if item.finish_reason is not None and rid in self._live:
                    reason = str(item.finish_reason)
                    finished[rid] = reason
                    self._finish(rid, reason, end_s)
        return outputs, finished

    def _count_prefix_stats(self) -> None:
        stats = self._sched.kv_cache_manager.make_prefix_cache_stats()
        if stats is not None:
            queries = stats.queries + stats.preempted_queries
            hits = stats.hits + stats.preempted_hits
            self._c.prefix_cache_queries += queries
            self._c.prefix_cache_hits += hits
            self._last_empty = (queries, hits)
        external = getattr(self._sched, "connector_prefix_cache_stats", None)
        if external is not None and (external.requests or external.preempted_requests):
            # vLLM's external_prefix_cache_* count first lookups only (not a preempted one's)
            self._c.external_queries += external.queries
            self._c.external_hits += external.hits
            self._sched.connector_prefix_cache_stats = type(external)()  # as make_stats does

    def _turn(self) -> tuple[str, float, float]:
        turn = getattr(self._sched, "turn", None)
        controller = getattr(self._sched, "controller", None)
        vp = float(getattr(controller, "vruntime_prefill", 0.0))
        vd = float(getattr(controller, "vruntime_decode", 0.0))
        name = turn[0] if isinstance(turn, tuple) and turn[1] else "none"
        return str(name), vp, vd

    def _fingerprint(self) -> tuple[Any, ...] | None:
        """What the next step reads: requests, their progress, free blocks, scalar state.

        Counters that move every step whatever happens (vLLM's `current_step`, the plugin's
        time of its last update) are left out; a request held back until a later step
        (`next_decode_eligible_step`) means the state is not a fixed point (None).
        """
        sched = self._sched
        step = getattr(sched, "current_step", None)
        rows: list[tuple[Any, ...]] = []
        for queue in (sched.running, sched.waiting, *_parked_queues(sched)):
            for r in queue:
                eligible = getattr(r, "next_decode_eligible_step", None)
                if isinstance(eligible, int) and isinstance(step, int) and eligible > step:
                    return None
                rows.append((r.request_id, r.num_computed_tokens, int(r.status)))
            rows.append(())  # queue boundary
        scalars = [
            (name, value)
            for owner in (sched, getattr(sched, "controller", None))
            for name, value in sorted(vars(owner).items() if owner is not None else ())
            if isinstance(value, int | float | str | bool) and name not in _PER_STEP
        ]
        free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        return tuple(rows), free, tuple(scalars)

    def advance(self, now_s: float, until_s: float, max_steps: int = 1_000_000) -> AdvanceResult:
        """Run steps from `now_s` while work remains, until `until_s` or a request finishes."""
        t = now_s
        steps = empty = gen = 0
        last_token: float | None = None
        last_busy: float | None = None
        finished: dict[str, str] = {}
        while t < until_s and self._live and steps < max_steps:
            before = self._c.generation_tokens
            result = self._step(t, detail=False)
            t += result.duration_s
            steps += 1
            if result.gpu_busy:
                last_busy = t
                self._fixed_point = None
            if self._c.generation_tokens > before:
                gen += self._c.generation_tokens - before
                last_token = t
            if result.finished:
                finished.update(result.finished)
                self._fixed_point = None
                break
            if result.scheduled_tokens or result.preemptions:
                continue
            empty += 1
            if not self.config.skip_empty_steps:
                continue
            fingerprint = self._fingerprint()
            if fingerprint is not None and fingerprint == self._fixed_point and t < until_s:
                horizon = math.ceil((until_s - t) / self.config.empty_step_s)
                skipped = horizon if self._kv is None else self._kv_skip(t, horizon)
                self._skip(skipped)
                t += skipped * self.config.empty_step_s
                steps += skipped
                empty += skipped
                if skipped == horizon:
                    break
                continue  # a transfer completes: the next step sees it
            self._fixed_point = fingerprint
        self._now = t
        return AdvanceResult(t, steps, empty, gen, last_token, last_busy, finished)

    def _kv_skip(self, t: float, horizon: int) -> int:
        """Empty steps to skip from `t`, at most `horizon`: none may end at or after the next
        transfer's completion (the step that ends there reports it to the scheduler)."""
        if not self._kv.settled:
            return 0
        done: float | None = self._kv.next_done_s
        if done is None:
            return horizon
        before = math.ceil((done - t) / self.config.empty_step_s) - 1
        return max(0, min(horizon, before))

    def _skip(self, count: int) -> None:
        """Count `count` more empty steps like the last one (the state is a fixed point)."""
        c = self._c
        if self._batches is not None:
            self._batches.shift(count * self.config.empty_step_s)
        self.skipped_steps += count
        c.steps += count
        c.empty_steps += count
        queries, hits = self._last_empty
        c.prefix_cache_queries += queries * count
        c.prefix_cache_hits += hits * count
        counter = getattr(self._sched, "patched_metrics", None)
        turn = self._turn()[0]
        if counter is not None and turn != "none":  # the plugin's own counter, as if it ran
            counter.step(turn, True, count)

    # -- state ------------------------------------------------------------------------------
    def has_work(self) -> bool:
        """Whether anything is running or waiting."""
        return bool(self._live)

    def output_tokens(self, request_id: str) -> int | None:
        req = self._reqs.get(request_id)
        return None if req is None else req.words

    def request_info(self, request_id: str) -> RequestInfo | None:
        req = self._reqs.get(request_id)
        if req is None:
            return None
        if request_id not in self._live:
            state = "finished"
        else:
            vllm_req = self._sched.requests.get(request_id)
            running = vllm_req is not None and vllm_req in self._sched.running
            state = "running" if running else "waiting"
        return RequestInfo(
            prompt_tokens=req.prompt_tokens,
            cached_prompt_tokens=req.cached,
            output_tokens=req.words,
            arrival_s=req.arrival_s,
            first_scheduled_s=req.first_scheduled_s,
            first_token_s=req.first_token_s,
            finished_s=req.finished_s,
            state=state,
            finish_reason=req.reason,
            num_preemptions=req.preemptions,
        )

    def reply_words(self, request_id: str, count: int) -> list[str]:
        """The first `count` words of a request's reply (deterministic per request id)."""
        return output_words(request_id, 0, count)

    @property
    def num_gpus(self) -> int:
        return self.config.num_gpus

    @property
    def stats(self) -> EngineStats:
        """The counters and gauges now, named as the simulator's (and vLLM's) /metrics."""
        return engine_stats(self._sched, self._c, self._now, self._gpu_busy)

    def debug_state(self, now_s: float, frozen: bool = False) -> SimState:
        """The scheduler's state for a forensics bundle (the simulator's state schema)."""
        return scheduler_state(
            self._sched, self._c, self.config, now_s, self._now, self._gpu_busy, frozen
        )
