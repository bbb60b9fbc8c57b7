"""The fork's compute-share scheduling as a vLLM scheduler plugin (`--scheduler-cls`).

    vllm serve MODEL --scheduler-cls stallkit.engine.vllm_plugin.scheduler.PatchedScheduler \\
        --additional-config '{"patched_scheduler": {"policy": "base", "prefill_compute_share": 0.9}}'

`PatchedScheduler` (synchronous, vLLM's default on CPU) and `AsyncPatchedScheduler` (async
scheduling, vLLM's default on GPU) share one mixin over vLLM's own scheduler, so vLLM's
960-line `schedule()` is reused, not copied. Each step:

1. The controller (the simulator's `ComputeShareController`, one implementation) picks the
   turn before vLLM's `schedule()` runs: prefill is runnable when any request waits or a
   running request is mid-prefill, decode when a running request decodes.
2. vLLM schedules as usual. In a contended prefill turn, its preemption check
   (`_request_blocks_can_be_freed`, asked right after an allocation failed) is vetoed by the
   prefill-turn rule `controller.may_preempt`: under `base` always, under `fix` once the step
   has scheduled something (seen through successful `allocate_slots` calls in this step).
   Vetoed, vLLM stops the running pass; the waiting pass then stops at once when the running
   slots are full. A step that scheduled nothing is counted (`turn`, `empty="true"`) but charges
   nothing, so the controller picks the same prefill turn again: the livelock under `base`.
3. `update_from_output` charges the contended step's wall time to its class.
4. With a KV connector (`--kv-transfer-config`), restores from its host tier go through the
   fork's restore admission (`stallkit.engine.vllm_plugin.restore`); without one, nothing.

Pass order: the fork's prefill turn runs the prefill chunks, then the waiting pass, then the
leftover decodes; vLLM runs the running pass (chunks and decodes in admission order) first
and the waiting pass after it, and only if nothing was preempted. In the two regression cases
(every slot taken by a decode that needs a block, requests waiting) the waiting pass admits
nothing in either order, the first decode's allocation failure is the step's first event in
both, and the victim is the most recently admitted request in both, so the steps agree on
turn, emptiness and preemptions. They differ only where a turn both admits and decodes: a
prefill turn's decodes then take the token budget before the admissions rather than after.

Imports: vLLM, prometheus_client, the standard library and the tool's pure controller only.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import vllm
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from stallkit.engine.policy.controller import (
    ComputeShareController,
    Turn,
    may_preempt,
    runnable_classes,
)
from stallkit.engine.vllm_plugin.config import (
    ALLOW_UNTESTED_ENV,
    PatchedConfig,
    PatchedConfigError,
    check_version,
    parse_config,
)
from stallkit.engine.vllm_plugin.metrics import SchedulerMetrics
from stallkit.engine.vllm_plugin.restore import RestoreAdmission

logger = logging.getLogger("vllm.stallkit.patched")
LOG_PREFIX = "stallkit patched scheduler"
#: steps scheduled but not yet charged (async scheduling keeps one or two in flight)
_MAX_PENDING = 16

if TYPE_CHECKING:
    _Base = Scheduler
else:
    _Base = object


def load_config(vllm_config: Any, version: str) -> PatchedConfig:
    """The plugin's settings from `vllm_config.additional_config`, after the version guard.

    Logs the reason as one error line and raises PatchedConfigError when the engine must
    not start.
    """
    try:
        config = parse_config(getattr(vllm_config, "additional_config", None) or {})
        allow = config.allow_untested_vllm or os.environ.get(ALLOW_UNTESTED_ENV) == "1"
        refusal = check_version(version, allow)
        if refusal is not None:
            raise PatchedConfigError(refusal)
    except PatchedConfigError as exc:
        logger.error("%s: %s", LOG_PREFIX, exc)
        raise
    return config


class PatchedSchedulingMixin(_Base):
    """The turn, the preemption veto and the charge, over any vLLM v1 `Scheduler`."""

    #: the clock that times a step for the controller; in-process tests set a fake one
    clock: Callable[[], float] = staticmethod(time.monotonic)
    _in_schedule = False
    _allocation_failed = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.patched_config = load_config(self.vllm_config, vllm.__version__)
        share = self.patched_config.prefill_compute_share
        self.controller = ComputeShareController(share)
        engine = str(getattr(self.vllm_config.parallel_config, "data_parallel_rank", 0) or 0)
        model = self.vllm_config.model_config.served_model_name
        self.patched_metrics = SchedulerMetrics(str(model), engine, share)
        self._turn: Turn = "none"
        self._contended = False
        self._in_schedule = False
        self._scheduled_anything = False
        self._allocation_failed = False
        self._pending: dict[int, tuple[Turn, float]] = {}
        self._last_update_s = 0.0
        self._wrap_allocate_slots()
        self.restores: RestoreAdmission | None = None
        if getattr(self, "connector", None) is not None:
            # the fork's restore admission over the connector's host tier
            max_wait = self.patched_config.restore_max_wait_s
            self.restores = RestoreAdmission(self, max_wait, lambda: self.clock())
            self.restores.wrap(self.connector)
        logger.info(
            "%s: policy %s, prefill compute share %s (vLLM %s, %s)",
            LOG_PREFIX,
            self.patched_config.policy,
            share,
            vllm.__version__,
            type(self).__name__,
        )

    def _wrap_allocate_slots(self) -> None:
        """Watch allocations during a step: did any succeed, did the last one fail."""
        manager = self.kv_cache_manager
        allocate = manager.allocate_slots

        def observed(*args: Any, **kwargs: Any) -> Any:
            blocks = allocate(*args, **kwargs)
            if self._in_schedule:
                self._allocation_failed = blocks is None
                self._scheduled_anything |= blocks is not None
            return blocks

        setattr(manager, "allocate_slots", observed)  # noqa: B010 (an instance attribute)

    @property
    def turn(self) -> tuple[Turn, bool]:
        """The current (or last) step's turn and whether it was contended."""
        return self._turn, self._contended

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        remaining = (r.num_tokens - r.num_computed_tokens for r in self.running)
        _, num_waiting = self.get_request_counts()
        self._turn, self._contended = self.controller.select(
            *runnable_classes(remaining, num_waiting)
        )
        self._scheduled_anything = self._allocation_failed = False
        started = self.clock()
        self._in_schedule = True
        try:
            output = super().schedule(*args, **kwargs)
        finally:
            self._in_schedule = self._allocation_failed = False
        if self.restores is not None:
            self.restores.forget_admitted()
        empty = output.total_num_scheduled_tokens == 0
        self.patched_metrics.step(self._turn, empty)
        if self._contended and not empty:
            if len(self._pending) >= _MAX_PENDING:
                # outputs that never came back (an aborted step): forget the oldest
                self._pending.pop(next(iter(self._pending)))
            self._pending[id(output)] = (self._turn, started)
        return output

    def _request_blocks_can_be_freed(self, request: Any) -> bool:
        if self._allocation_failed:
            # asked right after a failed allocation: this is the running pass choosing a victim
            self._allocation_failed = False
            policy = self.patched_config.policy
            if not may_preempt(policy, self._turn, self._contended, self._scheduled_anything):
                return False
        return bool(super()._request_blocks_can_be_freed(request))

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        now = self.clock()
        pending = self._pending.pop(id(scheduler_output), None)
        if pending is not None:
            turn, started = pending
            # with async scheduling the next step is scheduled before this one's output
            # arrives: charge only the time since the previous output, not the overlap
            elapsed = now - max(started, self._last_update_s)
            if elapsed > 0:
                self.controller.charge(turn, elapsed)
                self.patched_metrics.charge(turn, elapsed)
        self._last_update_s = now
        return outputs


class PatchedScheduler(PatchedSchedulingMixin, Scheduler):
    """The patched scheduler for synchronous scheduling (vLLM's default on CPU)."""


class AsyncPatchedScheduler(PatchedSchedulingMixin, AsyncScheduler):
    """The patched scheduler for async scheduling (vLLM's default on GPU)."""
