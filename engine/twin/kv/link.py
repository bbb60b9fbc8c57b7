"""One direction of the twin's host link: transfers in FIFO order on engine time.

A transfer of `blocks` KV blocks submitted at `now` starts when the link is free (or at
`now`), then takes `latency_s + blocks * seconds_per_block`; the next one queues behind it,
as copies on one DMA stream do. Pure: time is an argument, nothing here sleeps.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Link", "Transfer", "TwoLinks"]


@dataclass(frozen=True)
class Transfer:
    """A job on a link: its id, how many blocks, when it was submitted and when it is done."""

    job_id: int
    blocks: int
    submitted_s: float
    done_s: float


class Link:
    """A FIFO link: `submit` queues a transfer, `finished` hands back the ones done by then."""

    def __init__(self, latency_s: float, seconds_per_block: float) -> None:
        self.latency_s = latency_s
        self.seconds_per_block = seconds_per_block
        self._free_s = 0.0
        self._queue: list[Transfer] = []
        #: transfers and blocks moved since the start (done or not)
        self.submitted = 0
        self.blocks = 0

    def submit(self, job_id: int, blocks: int, now_s: float) -> Transfer:
        """Queue `blocks` blocks at `now_s`; the transfer as it will complete."""
        start = max(now_s, self._free_s)
        done = start + self.latency_s + blocks * self.seconds_per_block
        self._free_s = done
        transfer = Transfer(job_id, blocks, now_s, done)
        self._queue.append(transfer)
        self.submitted += 1
        self.blocks += blocks
        return transfer

    def finished(self, now_s: float) -> list[Transfer]:
        """The transfers done by `now_s`, in order, taken off the link."""
        count = 0
        while count < len(self._queue) and self._queue[count].done_s <= now_s:
            count += 1
        done, self._queue = self._queue[:count], self._queue[count:]
        return done

    def done_s(self, job_ids: set[int]) -> float | None:
        """When the last of `job_ids` still on the link is done (None: none is)."""
        times = [t.done_s for t in self._queue if t.job_id in job_ids]
        return max(times) if times else None

    @property
    def next_done_s(self) -> float | None:
        """When the next transfer completes (None: the link is idle)."""
        return self._queue[0].done_s if self._queue else None

    @property
    def pending(self) -> int:
        return len(self._queue)


class TwoLinks:
    """What the twin's simulated movers share: stores on one link, loads on the other."""

    store_link: Link
    load_link: Link

    def _open_links(self, latency_s: float, seconds_per_block: float) -> None:
        self.store_link = Link(latency_s, seconds_per_block)
        self.load_link = Link(latency_s, seconds_per_block)

    @property
    def next_done_s(self) -> float | None:
        """When the next transfer on either link completes (None: both are idle)."""
        times = [
            t for t in (self.store_link.next_done_s, self.load_link.next_done_s) if t is not None
        ]
        return min(times) if times else None

    @property
    def pending(self) -> int:
        """Transfers still on either link."""
        return self.store_link.pending + self.load_link.pending
