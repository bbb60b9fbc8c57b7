"""The fork's restore admission over a vLLM KV connector's host tier.

vLLM's waiting pass asks the connector, for each request it reaches with nothing computed,
how many tokens it can load beyond the local prefix cache (`get_num_new_matched_tokens`).
With an async load vLLM allocates the request's blocks and parks it until the load lands,
whatever else the pool must hold. The fork instead admits such a restore only when a running
slot is free and the pool has room for the pages it loads plus its first step; otherwise the
restore waits for capacity (`deferred`, timed from its first refusal) and the pass goes on to
the next request. A restore that has waited `restore_max_wait_s` is admitted to recompute
its prompt (no external tokens), with one warning line.

The hook wraps the connector's own method: a refusal answers `(None, False)`, the connector
protocol's "ask again later", which vLLM's waiting pass already honours by skipping the
request for this step; an expiry answers `(0, False)`. vLLM asks only from the waiting pass,
and only while a running slot is free, so an engine whose waiting pass never runs (the
fork's livelock) never expires a restore, as in the fork. Imports the standard library only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("vllm.stallkit.patched")

_MatchFn = Callable[..., tuple[int | None, bool]]


class RestoreAdmission:
    """Deferral state of the restores a scheduler has refused, and the admission rule."""

    def __init__(self, scheduler: Any, max_wait_s: float, clock: Callable[[], float]) -> None:
        self._sched = scheduler
        self.max_wait_s = max_wait_s
        self._clock = clock
        #: request id -> engine time of its first refusal
        self.deferred_since: dict[str, float] = {}
        #: requests whose restore expired (warned once; admitted to recompute)
        self.recompute: set[str] = set()
        self.restores_recomputed = 0

    def wrap(self, connector: Any) -> None:
        """Put the admission rule in front of `connector.get_num_new_matched_tokens`."""
        match: _MatchFn = connector.get_num_new_matched_tokens

        def admitted(request: Any, num_computed_tokens: int, *args: Any, **kw: Any) -> Any:
            ext, load_async = match(request, num_computed_tokens, *args, **kw)
            if not ext or not load_async:
                return ext, load_async
            return self.decide(request, num_computed_tokens, ext)

        setattr(connector, "get_num_new_matched_tokens", admitted)  # noqa: B010

    def decide(self, request: Any, local_tokens: int, ext_tokens: int) -> tuple[int | None, bool]:
        """Admit the restore `(ext_tokens, True)`, defer it `(None, False)`, or let it
        recompute `(0, False)` once it has waited `max_wait_s`."""
        rid = request.request_id
        now = self._clock()
        if rid in self.recompute:
            return 0, False
        if self._fits(request, local_tokens, ext_tokens):
            self.deferred_since.pop(rid, None)
            return ext_tokens, True
        since = self.deferred_since.setdefault(rid, now)
        if now - since < self.max_wait_s:
            return None, False
        self.recompute.add(rid)
        self.restores_recomputed += 1
        logger.warning(
            "Request %s restore waited %.1f s (max wait %.1f s); recomputing its prompt",
            rid,
            now - since,
            self.max_wait_s,
        )
        return 0, False

    def _fits(self, request: Any, local_tokens: int, ext_tokens: int) -> bool:
        """A free running slot, and room for the loaded pages plus the first step's."""
        sched = self._sched
        if len(sched.running) >= sched.max_num_running_reqs:
            return False
        block = sched.block_size
        hit = local_tokens + ext_tokens
        step = min(request.num_tokens - hit, sched.max_num_scheduled_tokens)
        need = -(-(hit + step) // block) - local_tokens // block
        free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        return bool(need <= free)

    def forget_admitted(self) -> None:
        """Drop the state of requests no longer waiting (admitted, finished, aborted)."""
        requests = self._sched.requests
        for rid in [*self.deferred_since, *self.recompute]:
            request = requests.get(rid)
            if request is None or request.num_computed_tokens > 0 or _running(request):
                self.deferred_since.pop(rid, None)
                self.recompute.discard(rid)


def _running(request: Any) -> bool:
    status = getattr(request.status, "name", "")
    return bool(status not in ("WAITING", "PREEMPTED"))
