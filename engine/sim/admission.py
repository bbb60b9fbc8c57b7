"""The waiting pass of a scheduler step: FCFS admission, with restore admission polled here.

A waiting request whose prefix is in the host tier beyond what the GPU cache holds is a
restore: it needs a free slot and room for its pages plus its first chunk, otherwise it waits
for capacity (`deferred`, from its first refusal) and the pass goes on to the next request;
after `restore_max_wait_s` it is admitted like any request, recomputing its prompt. Any other
request that does not fit ends the pass (FCFS).

While the engine is saturated the same pass runs step after step with the same outcome:
every restore refused, the first plain request refused. Such a pass changes nothing but the
prefix-cache counters, so when neither the pool, the waiting queue nor the running count has
changed since, the step's budget is the same and no deferred restore has reached its max wait,
the pass is replayed: its counter increments are added again without polling each request. The result
is the same to the last bit (the counters are integers), only cheaper.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from stallkit.engine.sim.blocks import BlockPool
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.request import Request, StepWork
from stallkit.engine.sim.stats import Counters

#: Books `n` tokens of a request into the step (the scheduler's `_schedule`).
Schedule = Callable[[Request, int, StepWork, list[Request]], None]


@dataclass(frozen=True, slots=True)
class Replay:
    """A pass that changed nothing but counters: what it added to them."""

    #: earliest deferral among the restores it refused (None: it refused none)
    oldest_deferral: float | None
    queries: int
    hits: int
    external_queries: int
    external_hits: int
    polled: int
    #: recorded with a budget and every running slot taken: each request was refused for its
    #: slot, so the pass is the same whatever its budget (as long as it has one)
    any_budget: bool = False


class Admission:
    """The waiting pass over the scheduler's queues; `changed()` whenever `waiting` changes."""

    def __init__(
        self,
        config: SimConfig,
        pool: BlockPool,
        counters: Counters,
        log: logging.Logger,
        running: list[Request],
        waiting: deque[Request],
        schedule: Schedule,
    ) -> None:
        self.cfg = config
        self.pool = pool
        self.c = counters
        self.log = log
        self.running = running
        self.waiting = waiting
        self._schedule = schedule
        self._queue_version = 0
        # the (pool, queue, running count) state the replays were recorded in; per budget
        self._state: tuple[int, int, int] | None = None
        self._replays: dict[int, Replay] = {}

    def changed(self) -> None:
        """The waiting queue changed outside the pass (a request added, aborted, preempted)."""
        self._queue_version += 1

    def run(self, work: StepWork, sampled: list[Request], now_s: float) -> None:
        """One waiting pass at engine time `now_s`, booking what it admits into `work`."""
        state = (self.pool.epoch, self._queue_version, len(self.running))
        if state != self._state:
            self._state = state
            self._replays.clear()
        c = self.c
        replay = self.replay(work.budget, now_s)
        if replay is not None:
            self.apply(replay, work)
            return
        budget, polled = work.budget, work.restores_polled
        before = (c.prefix_cache_queries, c.prefix_cache_hits, c.external_queries, c.external_hits)
        pure, oldest = self._pass(work, sampled, now_s)
        if not pure:
            self._state = None
            self._replays.clear()
            return
        self._replays[budget] = Replay(
            oldest,
            c.prefix_cache_queries - before[0],
            c.prefix_cache_hits - before[1],
            c.external_queries - before[2],
            c.external_hits - before[3],
            work.restores_polled - polled,
            any_budget=budget > 0 and len(self.running) >= self.cfg.max_num_seqs,
        )

    def replay(self, budget: int, now_s: float) -> Replay | None:
        """The recorded pass a pass at `now_s` with `budget` would replay (None: it would run).

        No side effects: the steady decode loop (`stallkit.engine.sim.steady`) asks before each step.
        """
        replay = self.recorded(budget)
        if replay is not None and (
            replay.oldest_deferral is None
            or now_s - replay.oldest_deferral < self.cfg.restore_max_wait_s
        ):
            return replay
        return None

    def recorded(self, budget: int) -> Replay | None:
        """The pass recorded for `budget` in the current state, whatever the time."""
        if self._state != (self.pool.epoch, self._queue_version, len(self.running)):
            return None
        # prefill and decode turns enter the pass with different budgets (a decode turn's is
        # what its decodes left): one replay each, unless one stands for the other
        replay = self._replays.get(budget)
        if replay is not None or budget <= 0:
            return replay
        for recorded_budget, other in self._replays.items():
            # a pass that admitted nothing with a smaller budget (but some) admits nothing
            # with a larger one: each refused request would need as many blocks or more
            if other.any_budget or 0 < recorded_budget <= budget:
                return other
        return None

    def apply(self, replay: Replay, work: StepWork | None, times: int = 1) -> None:
        """Add a replayed pass's counter increments `times` over (its restores polled to `work`)."""
        c = self.c
        c.prefix_cache_queries += replay.queries * times
        c.prefix_cache_hits += replay.hits * times
        c.external_queries += replay.external_queries * times
        c.external_hits += replay.external_hits * times
        if work is not None:
            work.restores_polled += replay.polled * times

    def _pass(
        self, work: StepWork, sampled: list[Request], now_s: float
    ) -> tuple[bool, float | None]:
        """The pass itself; (whether it changed nothing but counters, earliest deferral refused)."""
        waiting, running = self.waiting, self.running
        max_seqs, max_wait = self.cfg.max_num_seqs, self.cfg.restore_max_wait_s
        pure = True
        oldest: float | None = None
        idx = 0
        while idx < len(waiting) and work.budget > 0:
            r = waiting[idx]
            gpu, total = self._lookup(r)
            if total > gpu and not r.recompute:
                work.restores_polled += 1
                if len(running) < max_seqs and self._restore(r, gpu, total, work, sampled, now_s):
                    del waiting[idx]
                    pure = False
                    continue
                since = r.deferred_since
                if since is None:
                    r.deferred_since = since = now_s
                    pure = False
                if now_s - since < max_wait:
                    if oldest is None or since < oldest:
                        oldest = since
                    idx += 1
                    continue
                # waited long enough: from now on it is admitted like any request, recomputing
                r.recompute = True
                pure = False
            if len(running) >= max_seqs or not self._admit(r, gpu, work, sampled, now_s):
                return pure, oldest
            del waiting[idx]
            pure = False
        return pure, oldest

    def _lookup(self, r: Request) -> tuple[int, int]:
        """Prefix lookup (counted, as vLLM counts it): GPU-cached and GPU-or-host blocks."""
        bs = self.cfg.block_size
        num_tokens = r.num_tokens
        key = (self.pool.version, (num_tokens - 1) // bs)
        if r.match_key != key:
            r.match_value = self.pool.match(r.chain, key[1])
            r.match_key = key
        gpu, total = r.match_value
        c = self.c
        c.prefix_cache_queries += num_tokens
        c.prefix_cache_hits += gpu * bs
        if self.cfg.host_tier_blocks and not r.recompute:
            c.external_queries += num_tokens - gpu * bs
            c.external_hits += (total - gpu) * bs
        return gpu, total

    def _restore(
        self, r: Request, gpu: int, total: int, work: StepWork, sampled: list[Request], now: float
    ) -> bool:
        """Admit a restore if its pages plus its first chunk fit; False leaves it waiting."""
        pool, bs = self.pool, self.cfg.block_size
        hit_tokens = total * bs
        n = min(r.num_tokens - hit_tokens, work.budget)
        step_blocks = -(-(hit_tokens + n) // bs) - total
        if r.host_key != r.match_key:  # the cache changed since the last poll
            r.host_only = pool.host_only(r.chain, gpu, total)
            r.host_key = r.match_key
        if r.host_only + step_blocks > pool.num_free:
            return False  # its host-only blocks and its step do not fit (no need to list them)
        if r.split_key != r.match_key:  # the cache changed since the last poll
            r.split_value = pool.split(r.chain, gpu, total)
            r.split_key = r.match_key
        on_gpu, from_host = r.split_value
        need = len(from_host) + step_blocks
        if need > pool.num_free or need > pool.free_after_acquire(on_gpu):
            return False
        pool.acquire(on_gpu)
        pool.restore(from_host)
        pool.allocate(step_blocks)
        r.blocks = [*r.chain[:total], *([None] * step_blocks)]
        work.restored_blocks += len(from_host)
        self.c.restores_done += 1
        self._start(r, total, len(from_host) * bs, now)
        self._schedule(r, n, work, sampled)
        return True

    def _admit(
        self, r: Request, gpu: int, work: StepWork, sampled: list[Request], now: float
    ) -> bool:
        """Admit a request on its GPU prefix hits; False if its first chunk does not fit."""
        pool, bs = self.pool, self.cfg.block_size
        if r.num_tokens > self.cfg.num_blocks * bs:
            return False  # longer than the whole pool (fault `block`): it never fits
        hit_tokens = gpu * bs
        n = min(r.num_tokens - hit_tokens, work.budget)
        need = -(-(hit_tokens + n) // bs) - gpu
        hits = r.chain[:gpu]
        if need > pool.num_free or need > pool.free_after_acquire(hits):
            return False
        pool.acquire(hits)
        pool.allocate(need)
        r.blocks = [*hits, *([None] * need)]
        if r.recompute:
            self.c.restores_recomputed += 1
            waited = now - (r.deferred_since if r.deferred_since is not None else now)
            self.log.warning(
                "Request %s restore waited %.1f s (max wait %.1f s); recomputing its prompt",
                r.id,
                waited,
                self.cfg.restore_max_wait_s,
            )
        self._start(r, gpu, 0, now)
        self._schedule(r, n, work, sampled)
        return True

    def _start(self, r: Request, computed_blocks: int, external_tokens: int, now: float) -> None:
        """Move an admitted request to the running list (first scheduling counts its prompt)."""
        bs = self.cfg.block_size
        r.num_computed = computed_blocks * bs
        r.num_registered = computed_blocks
        r.deferred_since = None
        r.recompute = False
        self.running.append(r)
        if r.first_scheduled_s is None:
            r.first_scheduled_s = now
            cached = computed_blocks * bs
            r.cached_prompt_tokens = cached
            self.c.count_prompt(r.prompt_len, cached - external_tokens, external_tokens)
