"""The model runner's half of a KV connector, in the twin: its calls, in vLLM's order.

A real engine's model runner, each step (vLLM 0.32's `execute_model` and
`KVConnectorModelRunnerMixin._get_kv_connector_output`, empty steps included): the
connector's `handle_preemptions` (submits the stores deferred from the last step, flushes the
ones the scheduler asks for), `bind_connector_metadata`, `start_load_kv`, the forward,
`wait_for_save`, `get_transfer_results`, then a `KVConnectorOutput` on the
`ModelRunnerOutput`, whose completions `update_from_output` hands to the connector's scheduler
half. `KvDriver` makes those calls on a worker-role connector built by vLLM's own factory,
with the twin's byte mover: `SimOffloadingWorker` for OffloadingConnector, `SimCopyBackend`
for SimpleCPUOffloadConnector; for LMCacheConnectorV1, whose worker builds a GPU engine,
`LMCacheWorkerSim` takes the worker-role connector's place (`lmcache_worker.py`). Loads the
mover makes fail (`LoadFaults`) are reported in `invalid_block_ids`, as a model runner
reports the connector's load errors.

The calls follow the installed release: where a connector has no `get_transfer_results`
(vLLM 0.22, 0.23) its completions come from `get_finished`, and where the model runner's
empty step skips `wait_for_save` (0.22, 0.23: `kv_connector_no_forward` passes
`wait_for_save=False`) the twin's empty steps skip it too. Imports vLLM.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
    OffloadingConnector,
)
from vllm.distributed.kv_transfer.kv_connector.v1.simple_cpu_offload_connector import (
    SimpleCPUOffloadConnector,
)
from vllm.v1.outputs import KVConnectorOutput

from stallkit.engine.errors import EngineError
from stallkit.engine.twin.kv.faults import LoadFaults
from stallkit.engine.twin.kv.settings import LMCACHE, check_host_tier, host_capacity
from stallkit.engine.twin.kv.simple import SimCopyBackend, attach_simple_mover, no_cuda_stream
from stallkit.engine.twin.kv.worker import SimOffloadingWorker, seat_worker

if TYPE_CHECKING:
    from stallkit.engine.twin.kv.lmcache_worker import LMCacheWorkerSim

__all__ = ["KvDriver"]

#: the fields this release's KVConnectorOutput has (failed_recving came after 0.23)
_OUTPUT_FIELDS = frozenset(f.name for f in dataclasses.fields(KVConnectorOutput))


def _empty_step_saves() -> bool:
    """Whether this release's model runner calls `wait_for_save` on a step with no forward."""
    try:
        from vllm.v1.worker.kv_connector_model_runner_mixin import KVConnectorModelRunnerMixin
    except ImportError:  # gone in 0.34: its successor's no_forward calls wait_for_save
        return True
    try:
        source = inspect.getsource(KVConnectorModelRunnerMixin.kv_connector_no_forward)
    except (OSError, TypeError):  # no source shipped: the later releases' behaviour
        return True
    return "wait_for_save=False" not in source.replace(" ", "")


class KvDriver:
    """The worker half of the scheduler's connector, stepped with the twin."""

    def __init__(
        self, sched: Any, latency_s: float, seconds_per_block: float, load_failure_every: int = 0
    ) -> None:
        self.faults = LoadFaults(load_failure_every)
        self._simple = False
        self.worker: SimOffloadingWorker | SimCopyBackend | LMCacheWorkerSim
        if type(sched.connector).__name__ == LMCACHE:
            from stallkit.engine.twin.kv.lmcache_config import HOST_BLOCKS_KEY
            from stallkit.engine.twin.kv.lmcache_worker import attach_lmcache

            extra = sched.vllm_config.kv_transfer_config.kv_connector_extra_config
            host_blocks = int(extra[HOST_BLOCKS_KEY])
            self.worker = attach_lmcache(
                sched.connector, host_blocks, latency_s, seconds_per_block, self.faults
            )
            connector: Any = self.worker
        else:
            connector = KVConnectorFactory.create_connector(
                sched.vllm_config, KVConnectorRole.WORKER, sched.kv_cache_config
            )
            groups = len(sched.kv_cache_config.kv_cache_groups)
            self.worker, self._simple = _attach_mover(
                connector, groups, latency_s, seconds_per_block, self.faults
            )
            if isinstance(connector, OffloadingConnector):  # a tier of nothing: refused now
                scheduler = getattr(sched.connector, "connector_scheduler", None)
                capacity = host_capacity(
                    getattr(scheduler, "manager", None),
                    getattr(connector.connector_worker, "spec", None),
                )
                extra = sched.vllm_config.kv_transfer_config.kv_connector_extra_config
                check_host_tier("OffloadingConnector", capacity, extra.get("cpu_bytes_to_use"))
        self.connector: Any = connector  # vLLM's worker-role calls are untyped there
        #: loads completed (requests restored from the host tier) and stores completed
        self.restores = 0
        self.stores_done = 0
        #: engine seconds steps waited on flushes
        self.flush_wait_s = 0.0
        #: engine seconds steps waited on synchronous loads (LMCache's)
        self.load_wait_s = 0.0
        #: store jobs the last step queued, submitted when the next one starts
        self.queued_stores = 0
        #: whether the last step reported completions to the scheduler
        self.delivered = False
        self._empty_step_saves = _empty_step_saves()

    def begin(self, out: Any, now_s: float) -> float:
        """A step's start at `now_s`: the connector's calls before the forward. Returns the
        seconds the step waits before its forward (a flush of stores it must not overtake)."""
        worker, meta = self.worker, out.kv_connector_metadata
        worker.now_s = worker.wait_until_s = now_s
        if isinstance(worker, SimCopyBackend):
            worker.launched = 0
        self.connector.handle_preemptions(meta)
        waited = max(0.0, worker.wait_until_s - now_s)
        self.flush_wait_s += waited
        worker.now_s = now_s + waited
        self.connector.bind_connector_metadata(meta)
        self.connector.start_load_kv(None)  # loads start as the forward is launched
        # synchronous loads (LMCache's) hold the forward back until they are done
        loads = max(0.0, worker.wait_until_s - worker.now_s)
        self.load_wait_s += loads
        return waited + loads

    def end(self, out: Any, end_s: float) -> KVConnectorOutput:
        """A step's end at `end_s`: what the model runner reports to the scheduler."""
        connector = self.connector
        self.worker.now_s = end_s
        self._save(out, bool(out.total_num_scheduled_tokens) or self._empty_step_saves)
        fields = self._transfer_results(out.finished_req_ids)
        if isinstance(self.worker, SimCopyBackend):  # 0.22 and 0.23 launch copies in there
            self.queued_stores = self.worker.launched
        output = KVConnectorOutput(
            **fields,
            invalid_block_ids=connector.get_block_ids_with_load_errors() | self.faults.due(end_s),
            kv_connector_stats=connector.get_kv_connector_stats(),
            kv_cache_events=connector.get_kv_connector_kv_cache_events(),
            kv_connector_worker_meta=connector.build_connector_worker_meta(),
        )
        connector.clear_connector_metadata()
        # completions change the scheduler's state only at its next schedule() (a loaded
        # request is promoted there), so the step after this one is not a fixed point
        self.delivered = bool(
            output.finished_recving or output.kv_connector_worker_meta or output.invalid_block_ids
        )
        self.restores += len(output.finished_recving or ())
        self.stores_done += self._stores_done(output)
        return output

    def _transfer_results(self, finished_req_ids: set[str]) -> dict[str, Any]:
        """The connector's completed sends and receives (and failed receives, where the
        release reports them), as KVConnectorOutput fields."""
        connector = self.connector
        if not hasattr(connector, "get_transfer_results"):  # vLLM 0.22, 0.23
            sending, recving = connector.get_finished(finished_req_ids)
            return {"finished_sending": sending, "finished_recving": recving}
        results = connector.get_transfer_results(finished_req_ids)
        fields = {
            "finished_sending": results.finished_sending,
            "finished_recving": results.finished_recving,
        }
        if "failed_recving" in _OUTPUT_FIELDS:
            fields["failed_recving"] = results.failed_recving
        return fields

    def _stores_done(self, output: KVConnectorOutput) -> int:
        """Store jobs (store copies, for SimpleCPUOffloadConnector) this output completes."""
        meta = output.kv_connector_worker_meta
        if self._simple:
            return len(getattr(meta, "completed_store_events", None) or {})
        completed = getattr(meta, "completed_jobs", None) or {}
        return len(completed) - len(output.finished_recving or ())

    def _save(self, out: Any, call: bool) -> None:
        """The connector's `wait_for_save` (where the model runner `call`s it), and what it
        leaves for the next step to submit."""
        if isinstance(self.worker, SimCopyBackend):  # stores launch now: not settled if any did
            if call:
                with no_cuda_stream():
                    self.connector.wait_for_save()
            self.queued_stores = self.worker.launched
            return
        if call:
            self.connector.wait_for_save()
        # queued for the next step's start (vLLM defers stores past token sampling)
        self.queued_stores = len(getattr(out.kv_connector_metadata, "store_jobs", ()))

    @property
    def next_done_s(self) -> float | None:
        """When the next transfer completes (None: nothing is in flight)."""
        return self.worker.next_done_s

    @property
    def settled(self) -> bool:
        """Whether the next empty step is like the last: it submits nothing (no store is
        queued for it) and the last step reported no completion."""
        return self.queued_stores == 0 and not self.delivered

    @property
    def host_chunks(self) -> int:
        """Chunks of the host tier (vLLM's manager, from the scheduler half's spec)."""
        return int(self.connector.connector_worker.spec.num_chunks)


def _attach_mover(
    connector: Any, groups: int, latency_s: float, seconds_per_block: float, faults: LoadFaults
) -> tuple[SimOffloadingWorker | SimCopyBackend, bool]:
    """The twin's byte mover, set into a worker-role connector over `groups` KV cache groups;
    whether it is SimpleCPUOffloadConnector's (its stores launch in the step, not the next)."""
    if isinstance(connector, SimpleCPUOffloadConnector):
        return attach_simple_mover(connector, latency_s, seconds_per_block, faults), True
    if not isinstance(connector, OffloadingConnector) or connector.connector_worker is None:
        raise EngineError(
            f"the twin has no byte mover for {type(connector).__name__}",
            "the twin runs OffloadingConnector and SimpleCPUOffloadConnector",
        )
    worker = SimOffloadingWorker(latency_s, seconds_per_block, faults)
    # the one seam: vLLM's worker half keeps its bookkeeping, the twin moves the bytes
    seat_worker(connector.connector_worker, worker, groups)
    return worker, False
