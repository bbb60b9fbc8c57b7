"""The twin's byte mover for vLLM's SimpleCPUOffloadConnector: its copy thread and CUDA events
on engine time.

vLLM's `SimpleCPUOffloadWorker` (real) launches each step's load and store copies on a
`DmaCopyBackend` (a thread issuing CUDA copies on a load and a store stream) and learns of
their completion by polling the CUDA event recorded after each copy; a preemption flush
synchronizes them all. Here the backend is two `Link`s, and an event is done when engine time
(`now_s`, set by the driver) reaches its copy's completion; `synchronize` records how long the
step must wait. Everything else (event high-water marks, `finished_recving`, the completed
store events for the scheduler half) is vLLM's. Imports vLLM and torch: used only where a twin
runs this connector.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from stallkit.engine.errors import EngineError
from stallkit.engine.twin.kv.faults import LoadFaults
from stallkit.engine.twin.kv.link import TwoLinks

__all__ = ["SimCopyBackend", "attach_simple_mover", "no_cuda_stream"]


class SimEvent:
    """A CUDA event stand-in: done once the mover's engine time reaches `done_s`."""

    def __init__(self, mover: SimCopyBackend, done_s: float) -> None:
        self._mover = mover
        self.done_s = done_s

    def query(self) -> bool:
        return self.done_s <= self._mover.now_s

    def synchronize(self) -> None:
        self._mover.wait_until_s = max(self._mover.wait_until_s, self.done_s)

    def record(self, stream: Any = None) -> None:
        """The compute-done event stores wait for: the forward is over when stores launch."""


class SimCopyBackend(TwoLinks):
    """`DmaCopyBackend`'s `launch_copy` on two FIFO links (loads, stores) on engine time."""

    def __init__(self, latency_s: float, seconds_per_block: float, faults: LoadFaults) -> None:
        self._open_links(latency_s, seconds_per_block)
        self.faults = faults
        #: engine time now, and the latest time a flush has to reach (as in SimOffloadingWorker)
        self.now_s = 0.0
        self.wait_until_s = 0.0
        #: copies launched since the driver last reset it (a step that launches is not settled)
        self.launched = 0
        self._jobs = 0

    def launch_copy(
        self,
        src_blocks: list[int],
        dst_blocks: list[int],
        is_store: bool,
        event_idx: int,
        events_list: list[tuple[int, Any]],
        wait_event: Any = None,
    ) -> None:
        self._jobs += 1
        self.launched += 1
        link = self.store_link if is_store else self.load_link
        transfer = link.submit(self._jobs, len(src_blocks), self.now_s)
        if not is_store:
            self.faults.on_load(transfer.done_s, dst_blocks)
        events_list.append((event_idx, SimEvent(self, transfer.done_s)))

    def shutdown(self) -> None:
        """Nothing to stop: no thread runs."""

    def _prune(self) -> None:
        self.store_link.finished(self.now_s)
        self.load_link.finished(self.now_s)

    @property
    def next_done_s(self) -> float | None:
        """When the next copy still in flight completes (None: both links are idle)."""
        self._prune()
        return super().next_done_s

    @property
    def pending(self) -> int:
        self._prune()
        return super().pending


def attach_simple_mover(
    connector: Any, latency_s: float, seconds_per_block: float, faults: LoadFaults
) -> SimCopyBackend:
    """Give a worker-role SimpleCPUOffloadConnector the twin's mover; the mover.

    The one seam: vLLM's worker handler keeps its bookkeeping, the twin moves the bytes
    (`register_kv_caches` would want real tensors, pinned memory and a GPU).
    """
    handler = getattr(connector, "worker_handler", None)
    if handler is None:
        raise EngineError(
            "SimpleCPUOffloadConnector has no worker half (it needs prefix caching)",
            "drop --no-enable-prefix-caching from the engine arguments",
        )
    if getattr(handler, "disk_mode", False):
        raise EngineError(
            "the twin runs SimpleCPUOffloadConnector's CPU backend only, not disk",
            'drop "kv_offload_backend" from kv_connector_extra_config',
        )
    backend = SimCopyBackend(latency_s, seconds_per_block, faults)
    handler._backend = backend
    handler._store_compute_done = SimEvent(backend, 0.0)
    return backend


@contextlib.contextmanager
def no_cuda_stream() -> Iterator[None]:
    """`torch.cuda.current_stream()` answers None for the duration (vLLM's worker asks for the
    stream its stores wait on; the twin has no GPU). Restored on exit."""
    saved = torch.cuda.current_stream
    torch.cuda.current_stream = lambda device=None: None  # type: ignore[assignment,return-value]
    try:
        yield
    finally:
        torch.cuda.current_stream = saved
