"""The twin's byte mover for vLLM's OffloadingConnector: an `OffloadingWorker` on engine time.

vLLM's `OffloadingConnectorWorker` (real) hands its store and load jobs to an
`OffloadingWorker`; on a GPU that is `CPUOffloadingWorker`, CUDA copies between the KV pool
and pinned host memory. Here it is two `Link`s, GPU to host and host to GPU: a job completes
when its link gets to it, and `get_finished` reports the jobs done by the engine time the
driver set (`now_s`). `wait` (a flush before blocks are reused) records how long the step
must wait. Imports vLLM: used only where a twin runs with a connector.

vLLM's seam moved between releases: later ones call an `OffloadingWorker` with
`submit_store` / `submit_load`, earlier ones (0.22, 0.23) a worker that routes each
`transfer_async(job_id, (src, dst))` to an `OffloadingHandler` by the two media. The class
takes whichever base the installed vLLM has and answers both calls; a transfer whose
destination is the GPU pool is a load. In 0.34 the GPU side of a job is `DevicePointers`,
resolved over the connector worker's KV tensors; `seat_worker` gives it stand-ins whose
pointers are the block ids.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.kv_offload import base as _base
from vllm.v1.kv_offload.base import GPULoadStoreSpec, LoadStoreSpec

from stallkit.engine.twin.kv.faults import LoadFaults
from stallkit.engine.twin.kv.link import TwoLinks

__all__ = ["SimOffloadingWorker", "seat_worker"]

if hasattr(_base, "OffloadingWorker"):  # submit_store / submit_load
    _WorkerBase: Any = _base.OffloadingWorker
    _Result: Any = _base.TransferResult
else:  # transfer_async on a handler (vLLM 0.22, 0.23)
    from vllm.v1.kv_offload.worker import worker as _handlers

    _WorkerBase = _handlers.OffloadingHandler
    _Result = _handlers.TransferResult


class SimOffloadingWorker(TwoLinks, _WorkerBase):  # type: ignore[misc]
    """Stores on one link, loads on the other, both FIFO on engine time."""

    def __init__(
        self, latency_s: float, seconds_per_block: float, faults: LoadFaults | None = None
    ) -> None:
        self.faults = faults if faults is not None else LoadFaults(0)
        self._open_links(latency_s, seconds_per_block)
        #: engine time now (the driver moves it: submissions and completions happen at it)
        self.now_s = 0.0
        #: the latest time a `wait` has to reach (a flush holds the step until then)
        self.wait_until_s = 0.0

    @staticmethod
    def _gpu_blocks(gpu: Any) -> list[int]:
        """The GPU pool's block ids of a transfer: a spec's, or (0.34, `DevicePointers`) its
        pointers, which `seat_worker` makes the block ids themselves."""
        ids = gpu.block_ids if hasattr(gpu, "block_ids") else gpu.ptrs
        return [int(block) for block in ids]

    def submit_store(self, job_id: int, src: Any, dst_spec: LoadStoreSpec) -> bool:
        self.store_link.submit(job_id, len(self._gpu_blocks(src)), self.now_s)
        return True

    def submit_load(
        self, job_id: int, src_spec: LoadStoreSpec, dst: Any, expedited: bool = False
    ) -> bool:
        blocks = self._gpu_blocks(dst)
        transfer = self.load_link.submit(job_id, len(blocks), self.now_s)
        self.faults.on_load(transfer.done_s, blocks)
        return True

    def transfer_async(self, job_id: int, spec: tuple[LoadStoreSpec, LoadStoreSpec]) -> bool:
        """The earlier seam: one call for both directions, a load when it fills the GPU pool."""
        src, dst = spec
        if isinstance(dst, GPULoadStoreSpec):
            return self.submit_load(job_id, src, dst)
        assert isinstance(src, GPULoadStoreSpec)
        return self.submit_store(job_id, src, dst)

    def get_finished(self) -> list[Any]:
        done = self.store_link.finished(self.now_s) + self.load_link.finished(self.now_s)
        done.sort(key=lambda t: (t.done_s, t.job_id))
        return [_Result(job_id=t.job_id, success=True) for t in done]

    def shutdown(self) -> None:
        """Nothing to stop: no thread runs."""

    def wait(self, job_ids: set[int]) -> None:
        for link in (self.store_link, self.load_link):
            done = link.done_s(job_ids)
            if done is not None:
                self.wait_until_s = max(self.wait_until_s, done)


class _BlockIds:
    """A KV tensor's stand-in at address 0, one byte a block: a pointer into it is a block id."""

    @staticmethod
    def data_ptr() -> int:
        return 0

    @staticmethod
    def stride(dim: int) -> int:
        return 1


def seat_worker(connector_worker: Any, worker: SimOffloadingWorker, groups: int) -> None:
    """Put the twin's byte mover into vLLM's `OffloadingConnectorWorker` (its
    `register_kv_caches` would want real tensors and a GPU). Where the connector worker hands
    the mover device pointers (0.34: `DevicePointers`, resolved over its canonical KV caches),
    it gets `_BlockIds` for each of the `groups` KV cache groups, so the pointers are the
    GPU pool's block ids."""
    connector_worker.worker = worker
    if hasattr(_base, "DevicePointers"):
        stand_in: Any = _BlockIds()
        tensor = _base.CanonicalKVCacheTensor(tensor=stand_in, page_size_bytes=1)
        refs = [[_base.CanonicalKVCacheRef(tensor_idx=0, page_size_bytes=1)] for _ in range(groups)]
        connector_worker._kv_caches = _base.CanonicalKVCaches(
            tensors=[tensor], group_data_refs=refs
        )
