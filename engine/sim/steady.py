"""The steady decode loop: runs of alike decode steps, stepped without the generic passes.

Most steps of a loaded engine are alike: every running request decodes one token, none needs
a new block, fills one or finishes, and the waiting pass changes nothing but the prefix-cache
counters (a pass `Admission.replay` holds). Such a step's outcome is known without running
the passes: the controller picks its turn as ever, the replayed pass adds its counters, each
running request decodes one token, and the step is accounted, charged and sampled by the
scheduler's own methods. `run_quiet` runs those steps back to back and hands back before the
first step that is not quiet, so `Scheduler.advance` gives the same result, to the last bit,
as stepping one step at a time (the tests compare both). On the restore-stall kit this covers
about nine steps in ten.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from typing import Protocol

from stallkit.engine.core.records import ITERATION_TOKEN_BOUNDS
from stallkit.engine.policy.controller import ComputeShareController, runnable_classes
from stallkit.engine.sim.admission import Admission
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.request import Request
from stallkit.engine.sim.stats import Counters


class SchedulerState(Protocol):
    """What the loops read and move of the scheduler (`stallkit.engine.sim.scheduler.Scheduler`)."""

    cfg: SimConfig
    running: list[Request]
    waiting: deque[Request]
    ctl: ComputeShareController
    c: Counters
    admission: Admission
    step_no: int
    now_s: float
    gpu_busy: bool
    last_step_empty: bool


def quiet_steps(running: Sequence[Request], block_size: int) -> int:
    """How many steps from now every running request stays quiet: decodes one token with no
    new block, no block becoming full and no finish. 0 when one is not decoding."""
    bs = block_size
    steps: int | None = None
    for r in running:
        nc = r.num_computed
        if r.num_tokens - nc != 1:
            return 0
        # step j (from 1) is quiet for r while nc + j fits its blocks, stays short of its next
        # full block, and its outputs stay short of max_outputs (the least of the three, as
        # comparisons: this runs before every stretch)
        q = len(r.blocks) * bs - nc
        full = (r.num_registered + 1) * bs - 1 - nc
        if full < q:
            q = full
        outputs = r.max_outputs - 1 - r.num_outputs
        if outputs < q:
            q = outputs
        if steps is None or q < steps:
            steps = q
    return steps if steps is not None and steps > 0 else 0


def run_quiet(
    s: SchedulerState, now_s: float, until_s: float, max_steps: int
) -> tuple[float, int, int]:
    """Run quiet steps from `now_s` while engine time is short of `until_s`.

    Returns (engine time after them, steps run, tokens generated); 0 steps when the next step
    is not quiet (the caller then runs it through the passes). Per step only what can differ
    between quiet steps is computed (the turn, the cost, the clocks); the requests' tokens and
    the counters are brought up to date once, at the end.
    """
    running, cfg = s.running, s.cfg
    n = len(running)
    budget = cfg.max_num_batched_tokens
    if not n or n > budget or now_s >= until_s:
        return now_s, 0, 0
    limit = min(quiet_steps(running, cfg.block_size), max_steps)
    if limit <= 0:
        return now_s, 0, 0
    ctl, admission, c, cost = s.ctl, s.admission, s.c, cfg.cost
    # a prefill turn enters the waiting pass with its whole budget (its decodes come after),
    # a decode turn with what its decodes left; a quiet step changes neither pass's outcome
    by_turn = (admission.recorded(budget - n), admission.recorded(budget))
    max_wait = cfg.restore_max_wait_s
    prefill_runnable = bool(s.waiting)
    overhead, per_ctx = cost.step_overhead_s, cost.decode_per_context_token_s
    seqs_s = n * cost.decode_per_seq_s
    context = sum(r.num_computed for r in running)
    busy_s, decode_compute_s = c.busy_s, c.compute_decode_s
    # the controller's `select` and `charge`, inlined on local clocks (the same operations in
    # the same order: the tests compare with stepping through them). With one class runnable
    # a step is uncontended and `select` resets both clocks, idempotently.
    share = ctl.share
    contended = share != 0 and prefill_runnable
    if share != 0 and not prefill_runnable:
        ctl.reset()
    vp, vd = ctl.vruntime_prefill, ctl.vruntime_decode
    deferrals = tuple(None if r is None else r.oldest_deferral for r in by_turn)
    replays = [0, 0]
    first_end = last_start = now_s
    steps = 0
    while steps < limit and now_s < until_s:
        prefill_turn = 1 if contended and vp < vd else 0
        if by_turn[prefill_turn] is None:
            break
        oldest = deferrals[prefill_turn]
        if oldest is not None and not now_s - oldest < max_wait:
            break
        replays[prefill_turn] += 1
        # `Scheduler._account` for a step of n decodes and nothing else, term for term (its
        # prefill part is 0.0, so the compute is all decode's)
        decode_s = seqs_s + context * per_ctx
        duration = overhead + decode_s
        decode_compute_s += decode_s + overhead
        busy_s += duration
        if contended:  # (`max(a, b)` as a comparison: a is kept when b is not greater)
            if prefill_turn:
                charge = duration / share
                vp += charge
                trail = vp - charge
                if trail > vd:
                    vd = trail
            else:
                charge = duration / (1.0 - share)
                vd += charge
                trail = vd - charge
                if trail > vp:
                    vp = trail
        context += n
        last_start = now_s
        now_s += duration
        if not steps:
            first_end = now_s
        steps += 1
    ctl.vruntime_prefill, ctl.vruntime_decode = vp, vd
    if steps:
        _book(s, steps, first_end, last_start)
        for turn_replay, times in zip(by_turn, replays, strict=True):
            if times and turn_replay is not None:
                admission.apply(turn_replay, None, times)
        c.busy_s, c.compute_decode_s = busy_s, decode_compute_s
        c.steps += steps
        c.iteration_counts[bisect_left(ITERATION_TOKEN_BOUNDS, n)] += steps
        c.iteration_sum += n * steps
        c.generation_tokens += n * steps
    return now_s, steps, n * steps


def _book(s: SchedulerState, steps: int, first_end: float, last_start: float) -> None:
    """Each running request's `steps` decoded tokens (as `Scheduler._sample` counts them)."""
    s.step_no += steps
    s.now_s = last_start
    s.gpu_busy = True
    s.last_step_empty = False
    for r in s.running:
        r.num_outputs += steps
        r.num_tokens += steps
        r.num_computed += steps
        r.last_step = s.step_no
        if r.first_token_s is None:
            r.first_token_s = first_end


def run_idle(s: SchedulerState, now_s: float, until_s: float, max_steps: int) -> tuple[float, int]:
    """Repeat an empty step (the livelock's step) while it stays the same.

    After a step that scheduled nothing and preempted nothing, only the counters moved, so
    the next step repeats it exactly as long as its waiting pass is a replay (with the whole
    budget: nothing was booked before it) that no restore's max wait has expired. Returns
    (engine time after the repeats, steps run); 0 steps when the next step may differ.
    """
    if not s.last_step_empty:
        return now_s, 0
    admission, ctl, c = s.admission, s.ctl, s.c
    budget = s.cfg.max_num_batched_tokens
    idle_s = s.cfg.idle_tick_s
    remaining = [r.num_tokens - r.num_computed for r in s.running]
    runnable = runnable_classes(remaining, len(s.waiting))
    steps = 0
    while steps < max_steps and now_s < until_s:
        replay = admission.replay(budget, now_s)
        if replay is None:
            break
        ctl.select(*runnable)  # as the full step would (an uncontended one resets the clocks)
        s.now_s = now_s
        s.step_no += 1
        admission.apply(replay, None)
        s.gpu_busy = False
        c.empty_steps += 1
        c.steps += 1
        now_s += idle_s
        steps += 1
    return now_s, steps
