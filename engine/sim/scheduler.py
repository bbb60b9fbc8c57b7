"""The fork's scheduler step: running pass, waiting pass with restore admission, leftover decode.

One step: the controller picks a turn. A contended prefill turn continues running prefill
chunks, runs the waiting pass (FCFS; restores are polled here), then the leftover decode pass,
which under policy `base` may not preempt and under `fix` may preempt while the step has
scheduled nothing. A decode turn, or an uncontended step, runs the running pass with preemption
(victim: the most recently admitted request) and then the waiting pass if nothing was
preempted. An allocation failure without permission to preempt ends the pass. The passes
themselves live in `stallkit.engine.sim.running` and `stallkit.engine.sim.admission`; this module holds the
engine's state, the requests' way in and out, and the step around the passes.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Sequence

from stallkit.engine.core.records import (
    AdvanceResult,
    EngineStats,
    RequestInfo,
    StepResult,
    check_request,
)
from stallkit.engine.policy.controller import ComputeShareController, Turn, runnable_classes
from stallkit.engine.sim.admission import Admission
from stallkit.engine.sim.blocks import ROOT_HASH, BlockPool, chain_hashes
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.request import Request, StepWork, is_deferred, request_info
from stallkit.engine.sim.running import RunningPass
from stallkit.engine.sim.stats import Counters
from stallkit.engine.sim.steady import run_idle, run_quiet

#: Finished requests remembered for `request_info`.
FINISHED_KEPT = 4096


class Scheduler:
    """The engine state and the step; `SimEngine` is its public face."""

    def __init__(self, config: SimConfig, logger: logging.Logger) -> None:
        self.cfg = config
        self.log = logger
        self.pool = BlockPool(config.num_blocks, config.block_size, config.host_tier_blocks)
        self.ctl = ComputeShareController(config.prefill_compute_share)
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.live: dict[str, Request] = {}
        self.done: OrderedDict[str, RequestInfo] = OrderedDict()
        self.c = Counters()
        self.step_no = 0
        self.now_s = 0.0
        self.gpu_busy = False
        #: fault `thrash`: every request that completes its tokens is preempted instead
        self.thrash = False
        self._pending_finished: dict[str, str] = {}
        self.last_step_empty = False
        # the hash chains of the finished requests in `done`, for prompts that continue them
        self._chains: OrderedDict[str, list[int]] = OrderedDict()
        self._running = RunningPass(
            config, self.pool, self.c, logger, self.running, self.waiting, self._requeued
        )
        self.admission = Admission(
            config, self.pool, self.c, logger, self.running, self.waiting, self._running.schedule
        )

    # -- requests ---------------------------------------------------------------------------

    def add(
        self,
        request_id: str,
        prompt: Sequence[str],
        max_tokens: int,
        now_s: float,
        continues: str | None = None,
    ) -> None:
        cap = self.cfg.max_request_tokens
        check_request(request_id, len(prompt), max_tokens, cap, self.live)
        plen, bs = len(prompt), self.cfg.block_size
        tail = tuple(prompt[plen // bs * bs :])
        req = Request(request_id, plen, tail, min(max_tokens, cap - plen), now_s)
        req.chain = self._chain(prompt, continues)
        self.live[request_id] = req
        self.waiting.append(req)
        self.admission.changed()

    def add_blocker(self, request_id: str, now_s: float) -> None:
        """Fault `block`: queue at the head a request longer than the whole KV pool (one an
        engine should have refused), which the waiting pass can never admit."""
        bs = self.cfg.block_size
        plen = (self.cfg.num_blocks + 1) * bs
        prompt = [f"blocker{i}" for i in range(plen)]
        req = Request(request_id, plen, tuple(prompt[plen // bs * bs :]), 1, now_s)
        req.chain = self._chain(prompt, None)
        self.live[request_id] = req
        self.waiting.appendleft(req)
        self.admission.changed()

    def _chain(self, tokens: Sequence[str], continues: str | None) -> list[int]:
        """The hash chain of a prompt's full blocks, from a finished request's where it extends it.

        Checked on the last shared block only: the caller vouches for the blocks before it.
        """
        bs = self.cfg.block_size
        known = self._chains.get(continues, []) if continues is not None else []
        k = min(len(known), len(tokens) // bs)
        if k:
            parent = known[k - 2] if k > 1 else ROOT_HASH
            if hash((parent, tuple(tokens[(k - 1) * bs : k * bs]))) == known[k - 1]:
                return known[:k] + chain_hashes(tokens, bs, k, known[k - 1])
        return chain_hashes(tokens, bs, 0, ROOT_HASH)

    def abort(self, request_id: str, now_s: float) -> None:
        req = self.live.get(request_id)
        if req is None:
            return
        if req in self.running:
            self.running.remove(req)
            self.pool.release(req.blocks)
            req.blocks = []
        else:
            self.waiting.remove(req)
            self.admission.changed()
        self._finish(req, "abort", now_s)
        self._pending_finished[request_id] = "abort"

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def output_tokens(self, request_id: str) -> int | None:
        req = self.live.get(request_id)
        if req is not None:
            return req.num_outputs
        info = self.done.get(request_id)
        return None if info is None else info.output_tokens

    def info(self, request_id: str) -> RequestInfo | None:
        req = self.live.get(request_id)
        if req is None:
            return self.done.get(request_id)
        state = "running" if req.blocks or req in self.running else "waiting"
        return request_info(req, state, None, None)

    def snapshot(self) -> EngineStats:
        deferred = sum(1 for r in self.waiting if is_deferred(r))
        return self.c.snapshot(
            now_s=self.now_s,
            running=len(self.running),
            waiting=len(self.waiting),
            deferred=deferred,
            kv_usage=self.pool.usage,
            share=self.cfg.prefill_compute_share,
            gpu_busy=self.gpu_busy,
            vruntimes=(self.ctl.vruntime_prefill, self.ctl.vruntime_decode),
            host_tier_blocks=self.pool.host_size,
        )

    def describe(self) -> dict[str, object]:
        """The scheduler's state for forensics: turn clocks, pool, running and waiting."""

        def req(r: Request) -> dict[str, object]:
            return {
                "id": r.id,
                "tokens": r.num_tokens,
                "computed": r.num_computed,
                "outputs": r.num_outputs,
                "blocks": len(r.blocks),
                "preemptions": r.preemptions,
            }

        def reason(r: Request) -> str:
            return "deferred" if is_deferred(r) else "capacity"

        return {
            "step": self.step_no,
            "now_s": self.now_s,
            "policy": self.cfg.policy,
            "prefill_compute_share": self.ctl.share,
            "vruntime_prefill": self.ctl.vruntime_prefill,
            "vruntime_decode": self.ctl.vruntime_decode,
            "gpu_busy": self.gpu_busy,
            "empty_steps": self.c.empty_steps,
            "pool": {
                "num_blocks": self.cfg.num_blocks,
                "free": self.pool.num_free,
                "usage": self.pool.usage,
                "host_blocks": self.pool.host_size,
            },
            "running": [req(r) for r in self.running],
            "waiting": [
                req(r) | {"reason": reason(r), "deferred_since_s": r.deferred_since}
                for r in self.waiting
            ],
        }

    # -- the step ---------------------------------------------------------------------------

    def step(self, now_s: float) -> StepResult:
        outputs: dict[str, list[str]] = {}
        turn, work, duration, finished = self._step(now_s, outputs)
        finished.update(self._pending_finished)
        self._pending_finished = {}
        return StepResult(
            duration_s=duration,
            turn=turn,
            scheduled_tokens=work.scheduled,
            prefill_tokens=work.prefill_tokens,
            decode_tokens=work.decode_seqs,
            preemptions=work.preemptions,
            restores_polled=work.restores_polled,
            kv_usage=self.pool.usage,
            gpu_busy=work.scheduled > 0,
            vruntime_prefill=self.ctl.vruntime_prefill,
            vruntime_decode=self.ctl.vruntime_decode,
            outputs=outputs,
            finished=finished,
        )

    def advance(self, now_s: float, until_s: float, max_steps: int) -> AdvanceResult:
        steps = empty = tokens = 0
        last_token: float | None = None
        last_busy: float | None = None
        finished: dict[str, str] = dict(self._pending_finished)
        self._pending_finished = {}
        while now_s < until_s and steps < max_steps and (self.running or self.waiting):
            # most steps of a loaded engine: alike decodes, run lean (not while thrashing: every
            # token is then thrown back, which only the full step does)
            if self.running and not self.thrash:
                now_s, quiet, quiet_tokens = run_quiet(self, now_s, until_s, max_steps - steps)
                if quiet:
                    steps += quiet
                    tokens += quiet_tokens
                    last_token = last_busy = now_s
                    continue
            now_s, idle = run_idle(self, now_s, until_s, max_steps - steps)
            if idle:
                steps += idle
                empty += idle
                continue
            gen_before = self.c.generation_tokens
            _, work, duration, done = self._step(now_s, None)
            now_s += duration
            steps += 1
            if work.scheduled:
                last_busy = now_s
                if self.c.generation_tokens != gen_before:
                    tokens += self.c.generation_tokens - gen_before
                    last_token = now_s
            else:
                empty += 1
            if done:
                finished.update(done)
                break
        return AdvanceResult(now_s, steps, empty, tokens, last_token, last_busy, finished)

    def _step(
        self, now_s: float, outputs: dict[str, list[str]] | None
    ) -> tuple[Turn, StepWork, float, dict[str, str]]:
        self.now_s = now_s
        self.step_no += 1
        remaining = (r.num_tokens - r.num_computed for r in self.running)
        turn, contended = self.ctl.select(*runnable_classes(remaining, len(self.waiting)))
        work = StepWork(budget=self.cfg.max_num_batched_tokens, step=self.step_no)
        sampled: list[Request] = []
        if contended and turn == "prefill":
            self._running.run(work, sampled, "prefill", may_preempt=False)
            self.admission.run(work, sampled, now_s)
            # the leftover decode pass: the prefill-turn rule decides (base never, fix while empty)
            self._running.run(work, sampled, "decode", may_preempt=True)
        else:
            self._running.run(work, sampled, "all", may_preempt=True)
            if not work.preemptions:
                self.admission.run(work, sampled, now_s)
        # an empty step that preempted nothing changed only counters (see `steady.run_idle`)
        self.last_step_empty = not work.scheduled and not work.preemptions
        if not work.scheduled:
            self.gpu_busy = False
            self.c.empty_steps += 1
            self.c.steps += 1
            return turn, work, self.cfg.idle_tick_s, {}
        duration = self._account(work)
        if contended:
            self.ctl.charge(turn, duration)
        self.gpu_busy = True
        return turn, work, duration, self._sample(sampled, now_s + duration, outputs)

    def _requeued(self) -> None:
        """A preempted request went back to the head of the waiting queue."""
        self.admission.changed()

    # -- after the passes ---------------------------------------------------------------------

    def _account(self, work: StepWork) -> float:
        """The step's engine seconds from the cost model; counts compute by class."""
        cost = self.cfg.cost
        decode_s = cost.decode_s(work.decode_seqs, work.decode_context) if work.decode_seqs else 0.0
        prefill_s = work.prefill_s + work.restored_blocks * cost.restore_per_block_s
        work_s = prefill_s + decode_s
        duration = cost.step_overhead_s + work_s
        prefill_part = prefill_s / work_s if work_s else 0.0
        c = self.c
        c.compute_prefill_s += prefill_s + cost.step_overhead_s * prefill_part
        c.compute_decode_s += decode_s + cost.step_overhead_s * (1.0 - prefill_part)
        c.busy_s += duration
        c.steps += 1
        c.observe_iteration(work.scheduled)
        return duration

    def _sample(
        self, sampled: list[Request], end_s: float, outputs: dict[str, list[str]] | None
    ) -> dict[str, str]:
        """Append one output word to each request that completed its tokens; finish some."""
        finished: dict[str, str] = {}
        if self.thrash:  # thrown back before their token, to recompute: forever
            for r in sampled:
                self._running.preempt(r)
            return finished
        for r in sampled:
            if outputs is not None:
                outputs[r.id] = [r.output_word(r.num_outputs)]
            r.num_outputs += 1
            r.num_tokens += 1
            if r.first_token_s is None:
                r.first_token_s = end_s
            if r.num_outputs >= r.max_outputs:
                finished[r.id] = "length"
                self.running.remove(r)
                self.pool.release(r.blocks)
                r.blocks = []
                self._finish(r, "length", end_s)
        self.c.generation_tokens += len(sampled)
        return finished

    def _finish(self, r: Request, reason: str, now_s: float) -> None:
        del self.live[r.id]
        self.done[r.id] = request_info(r, "finished", reason, now_s)
        self._chains[r.id] = r.chain
        if len(self.done) > FINISHED_KEPT:
            self.done.popitem(last=False)
            self._chains.popitem(last=False)
        self.c.request_success[reason] = self.c.request_success.get(reason, 0) + 1
