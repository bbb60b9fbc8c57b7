"""Load failures on demand: every Nth load the twin's byte mover makes reports its blocks lost.

A real model runner reports the GPU blocks a KV load could not fill in
`KVConnectorOutput.invalid_block_ids`; vLLM's scheduler then recomputes those tokens or fails
the request, per the kv-transfer-config's `kv_load_failure_policy`. `LoadFaults` picks the
loads that fail (deterministic: the `every`-th, 2`every`-th, ... load of the run) and hands
back their blocks once the load is done on engine time. Pure: time is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["LoadFaults"]


class LoadFaults:
    """Which loads fail (`every`: 0 means none) and when their blocks are reported."""

    def __init__(self, every: int) -> None:
        self.every = every
        #: loads seen and loads made to fail since the start
        self.loads = 0
        self.failed = 0
        self._due: list[tuple[float, list[int]]] = []

    def on_load(self, done_s: float, block_ids: Iterable[int]) -> bool:
        """Count a load completing at `done_s` into `block_ids`; whether it fails."""
        self.loads += 1
        if self.every <= 0 or self.loads % self.every:
            return False
        self.failed += 1
        self._due.append((done_s, list(block_ids)))
        return True

    def due(self, now_s: float) -> set[int]:
        """The blocks of failed loads done by `now_s`, each reported once."""
        blocks: set[int] = set()
        keep: list[tuple[float, list[int]]] = []
        for done_s, ids in self._due:
            if done_s <= now_s:
                blocks.update(ids)
            else:
                keep.append((done_s, ids))
        self._due = keep
        return blocks
