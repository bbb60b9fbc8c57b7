"""The running pass of a scheduler step, preemption, and the booking both passes share.

The running pass schedules running requests in admission order: prefill chunks, decodes, or
both. A request that needs blocks the pool does not have preempts the most recently admitted
running request, when the pass may preempt: its blocks are freed (they stay cached), it goes
back to the head of the waiting queue and will recompute. Without permission to preempt, the
pass ends at the first request that does not fit. `schedule` books a request's tokens into
the step and caches its blocks as they fill; the waiting pass books its admissions with it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from stallkit.engine.policy.controller import may_preempt as rule_may_preempt
from stallkit.engine.sim.blocks import ROOT_HASH, BlockPool
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.request import Request, StepWork
from stallkit.engine.sim.stats import Counters


class RunningPass:
    """The running pass over the scheduler's queues; `requeued` is told of each preemption."""

    def __init__(
        self,
        config: SimConfig,
        pool: BlockPool,
        counters: Counters,
        log: logging.Logger,
        running: list[Request],
        waiting: deque[Request],
        requeued: Callable[[], None],
    ) -> None:
        self.cfg = config
        self.pool = pool
        self.c = counters
        self.log = log
        self.running = running
        self.waiting = waiting
        self._requeued = requeued

    def run(self, work: StepWork, sampled: list[Request], phase: str, may_preempt: bool) -> None:
        """Schedule running requests in admission order (phase: prefill, decode or all).

        `may_preempt=False` forbids preemption (the prefill chunks of a prefill turn). In the
        leftover decode pass (phase "decode") the prefill-turn rule `controller.may_preempt`
        decides: never under `base`, under `fix` while the step has scheduled nothing.
        """
        running, pool, bs, step_no = self.running, self.pool, self.cfg.block_size, work.step
        i = 0
        while i < len(running) and work.budget > 0:
            r = running[i]
            remaining = r.num_tokens - r.num_computed
            if r.last_step == step_no or (
                (remaining == 1) if phase == "prefill" else (remaining != 1 and phase == "decode")
            ):
                i += 1
                continue
            n = min(remaining, work.budget)
            need = -(-(r.num_computed + n) // bs) - len(r.blocks)
            while need > 0 and need > pool.num_free:
                if not may_preempt:
                    return
                if phase == "decode" and not rule_may_preempt(
                    self.cfg.policy, "prefill", True, work.scheduled > 0
                ):
                    return
                victim = running[-1]
                self.preempt(victim)
                work.preemptions += 1
                if victim is r:
                    return
            if need > 0:
                pool.allocate(need)
                r.blocks.extend([None] * need)
            if remaining == 1:  # a decode: `_schedule`'s decode branch, inlined (the hot path)
                work.decode_seqs += 1
                work.decode_context += r.num_computed
                r.num_computed += 1
                r.last_step = step_no
                work.scheduled += 1
                work.budget -= 1
                full = r.num_computed // bs
                if full > r.num_registered:
                    self._register(r, full)
                sampled.append(r)
            else:
                self.schedule(r, n, work, sampled)
            i += 1

    def schedule(self, r: Request, n: int, work: StepWork, sampled: list[Request]) -> None:
        """Book `n` tokens of `r` into this step."""
        if r.num_tokens - r.num_computed == 1:
            work.decode_seqs += 1
            work.decode_context += r.num_computed
        else:
            work.prefill_tokens += n
            work.prefill_s += self.cfg.cost.prefill_s(n, r.num_computed)
        r.num_computed += n
        r.last_step = work.step
        work.scheduled += n
        work.budget -= n
        full = r.num_computed // self.cfg.block_size
        if full > r.num_registered:
            self._register(r, full)
        if r.num_computed == r.num_tokens:
            sampled.append(r)

    def _register(self, r: Request, full: int) -> None:
        """Cache the request's blocks that just became full (extending its hash chain)."""
        bs, chain = self.cfg.block_size, r.chain
        while len(chain) < full:
            parent = chain[-1] if chain else ROOT_HASH
            chain.append(hash((parent, r.block_tokens(len(chain), bs))))
        blocks, pool = r.blocks, self.pool
        for k in range(r.num_registered, full):
            if blocks[k] is None and pool.register(chain[k]):
                blocks[k] = chain[k]
        r.num_registered = full

    def preempt(self, victim: Request) -> None:
        """Free the victim's blocks (they stay cached) and requeue it at the head."""
        self.running.remove(victim)
        self.pool.release(victim.blocks)
        victim.blocks = []
        victim.num_computed = 0
        victim.num_registered = 0
        victim.preemptions += 1
        victim.deferred_since = None
        victim.recompute = False
        self.waiting.appendleft(victim)
        self._requeued()
        self.c.num_preemptions += 1
        self.log.debug("Request %s preempted (KV cache full); it will recompute", victim.id)
