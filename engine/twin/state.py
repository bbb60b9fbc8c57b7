"""What the twin counts beside vLLM's scheduler, and how it reads out as the engine's records.

vLLM's scheduler forgets a request once it finishes and counts little of what `/metrics`
shows (that is the engine front's job on a real engine), so the twin keeps its own record per
request (`TwinRequest`) and the simulator's counters (`stallkit.engine.sim.stats.Counters`: steps,
empty steps, busy time, preemptions, prefix-cache queries and hits, tokens, finished
requests, the iteration-size histogram). `engine_stats` and `scheduler_state` read those and
the scheduler into the simulator's records (`EngineStats`, `SimState`), so the virtual clock,
the monitor and the forensics bundle treat the twin as any other engine core. With a KV
connector they also read what vLLM and the plugin keep of it: the waiting requests vLLM skips
(`deferred_waiting`: loads in flight, restores the plugin defers) as `deferred`, the plugin's
restores recomputed, and the host tier's blocks in use. Every read tolerates an older vLLM
that lacks the attribute (the figure is then what it was before: 0).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from stallkit.contract.scheduler_state import SimState
from stallkit.engine.core.records import EngineStats
from stallkit.engine.sim.stats import Counters
from stallkit.engine.twin.build import kv_cache_usage
from stallkit.engine.twin.config import TwinConfig

__all__ = [
    "TwinRequest",
    "deferred_waiting",
    "engine_stats",
    "host_tier_blocks",
    "restores_recomputed",
    "scheduler_state",
]


@dataclass
class TwinRequest:
    """The twin's own record of a request (vLLM's `Request` is gone once it finishes)."""

    prompt_tokens: int
    max_tokens: int
    arrival_s: float
    words: int = 0
    cached: int = 0
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    reason: str | None = None
    preemptions: int = 0


def _controller(sched: Any) -> Any:
    return getattr(sched, "controller", None)


def _compute_seconds(sched: Any) -> dict[str, float]:
    """The plugin's charged seconds by class (none for schedulers without its controller)."""
    metrics = getattr(sched, "patched_metrics", None)
    return metrics.compute_seconds() if metrics is not None else {}


def _parked(sched: Any) -> list[Any]:
    """Waiting queues beside `waiting` (0.32's `kv_holding_waiting`, 0.22's `skipped_waiting`)."""
    return [
        getattr(sched, n) for n in ("kv_holding_waiting", "skipped_waiting") if hasattr(sched, n)
    ]


def deferred_waiting(sched: Any) -> int:
    """Waiting requests vLLM skips for now, its `num_requests_waiting_by_reason{reason=
    "deferred"}` (0.32: `deferred_waiting`, loads in flight and restores the plugin defers;
    0.22 and 0.23: the `skipped_waiting` queue); else the plugin's deferred restores."""
    for name in ("deferred_waiting", "skipped_waiting"):  # 0.32, then 0.22's and 0.23's
        skipped = getattr(sched, name, None)
        if skipped is not None:
            return len(skipped)
    restores = getattr(sched, "restores", None)
    if restores is None:
        return 0
    return len(set(restores.deferred_since) - restores.recompute)


def restores_recomputed(sched: Any) -> int:
    """Restores the plugin let recompute after `restore_max_wait_s` (0 without its admission)."""
    restores = getattr(sched, "restores", None)
    return int(getattr(restores, "restores_recomputed", 0))


def host_tier_blocks(sched: Any) -> int:
    """KV blocks the connector's host tier holds now (0 without a connector or a known tier)."""
    connector = getattr(sched, "connector", None)
    offloading = getattr(connector, "connector_scheduler", None)
    manager = getattr(offloading, "manager", None)
    if manager is not None and hasattr(manager, "_num_allocated_chunks"):  # OffloadingConnector
        chunks = manager._num_allocated_chunks - len(manager._free_list)
        per_chunk = getattr(getattr(offloading, "config", None), "blocks_per_chunk", 1)
        return int(chunks * per_chunk)
    if manager is not None and hasattr(manager, "_num_allocated_blocks"):  # 0.22's, 0.23's
        held = manager._num_allocated_blocks - len(manager._free_list)
        factor = getattr(getattr(offloading, "config", None), "block_size_factor", 1)
        return int(held * factor)
    simple = getattr(connector, "scheduler_manager", None)  # SimpleCPUOffloadConnector
    pool = getattr(simple, "cpu_block_pool", None)
    cached = getattr(pool, "cached_block_hash_to_block", None)
    return len(getattr(cached, "_cache", ())) if cached is not None else 0


def engine_stats(sched: Any, c: Counters, now_s: float, gpu_busy: bool) -> EngineStats:
    """The counters and gauges now, as the simulator's core hands them out."""
    running, waiting = sched.get_request_counts()
    controller = _controller(sched)
    charged = _compute_seconds(sched)  # the plugin's, read now (the counters stay as they are)
    counters = replace(
        c,
        compute_prefill_s=charged.get("prefill", 0.0),
        compute_decode_s=charged.get("decode", 0.0),
        restores_recomputed=restores_recomputed(sched),
    )
    return counters.snapshot(
        now_s=now_s,
        running=running,
        waiting=waiting,
        deferred=min(waiting, deferred_waiting(sched)),
        kv_usage=kv_cache_usage(sched),
        share=float(getattr(controller, "share", 0.0)),
        gpu_busy=gpu_busy,
        vruntimes=(
            float(getattr(controller, "vruntime_prefill", 0.0)),
            float(getattr(controller, "vruntime_decode", 0.0)),
        ),
        host_tier_blocks=host_tier_blocks(sched),
    )


def scheduler_state(
    sched: Any,
    c: Counters,
    config: TwinConfig,
    now_s: float,
    last_s: float,
    gpu_busy: bool,
    frozen: bool,
) -> SimState:
    """The scheduler's state for a forensics bundle, in the simulator's state schema."""
    manager = sched.kv_cache_manager
    controller = _controller(sched)
    running = list(sched.running)
    skipped = set(getattr(sched, "deferred_waiting", ())) | set(
        getattr(sched, "skipped_waiting", ())
    )

    def row(request: Any) -> dict[str, Any]:
        blocks = manager.get_block_ids(request.request_id) if request in running else ()
        return {
            "id": request.request_id,
            "tokens": request.num_tokens,
            "computed": request.num_computed_tokens,
            "outputs": request.num_output_tokens,
            "blocks": len(blocks[0]) if blocks else 0,
            "preemptions": request.num_preemptions,
        }

    section = config.additional_config.get("patched_scheduler") or {}
    policy = section.get("policy") if isinstance(section, dict) else None
    return SimState.model_validate(
        {
            "engine_time_s": now_s,
            "frozen": frozen,
            "step": c.steps,
            "now_s": last_s,
            "policy": str(policy or type(sched).__name__),
            "prefill_compute_share": float(getattr(controller, "share", 0.0)),
            "vruntime_prefill": float(getattr(controller, "vruntime_prefill", 0.0)),
            "vruntime_decode": float(getattr(controller, "vruntime_decode", 0.0)),
            "gpu_busy": gpu_busy,
            "empty_steps": c.empty_steps,
            "pool": {
                "num_blocks": config.num_blocks,
                "free": manager.block_pool.get_num_free_blocks(),
                "usage": kv_cache_usage(sched),
                "host_blocks": host_tier_blocks(sched),
            },
            "running": [row(r) for r in running],
            "waiting": [
                row(r) | {"reason": "deferred" if r in skipped else "capacity"}
                for queue in (sched.waiting, *_parked(sched))
                for r in queue
            ],
        }
    )
