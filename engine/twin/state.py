"""What the twin counts beside vLLM's scheduler, and how it reads out as the engine's records.

vLLM's scheduler forgets a request once it finishes and counts little of what `/metrics`
shows (that is the engine front's job on a real engine), so the twin keeps its own record per
request (`TwinRequest`) and its own counters (`TwinCounters`: steps, empty steps, busy time,
preemptions, prefix-cache queries and hits, tokens, finished requests, the iteration-size
histogram). `engine_stats` and `scheduler_state` read those and the scheduler into the
simulator's records (`EngineStats`, `SimState`), so the virtual clock, the monitor and the
forensics bundle treat the twin as any other engine core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contract.simstate import SimState
from engine.sim.records import ITERATION_TOKEN_BOUNDS, EngineStats, HistogramSnapshot
from engine.twin.config import TwinConfig

__all__ = ["TwinCounters", "TwinRequest", "engine_stats", "iteration_bucket", "scheduler_state"]


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
    #: prompt and output token ids (kept for the newest finished requests: a next turn's prefix)
    ids: list[int] = field(default_factory=list)


@dataclass
class TwinCounters:
    """Counters since the start (monotonic), and whether the last step kept the GPU busy."""

    steps: int = 0
    empty_steps: int = 0
    busy_s: float = 0.0
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    generation: int = 0
    prompt: int = 0
    prompt_cached: int = 0
    success: dict[str, int] = field(default_factory=dict)
    iteration: list[int] = field(default_factory=lambda: [0] * (len(ITERATION_TOKEN_BOUNDS) + 1))
    iteration_sum: float = 0.0
    gpu_busy: bool = False


def iteration_bucket(tokens: int) -> int:
    """The iteration-tokens histogram bucket of a step that scheduled `tokens`."""
    for i, bound in enumerate(ITERATION_TOKEN_BOUNDS):
        if tokens <= bound:
            return i
    return len(ITERATION_TOKEN_BOUNDS)


def _controller(sched: Any) -> Any:
    return getattr(sched, "controller", None)


def _compute_seconds(sched: Any) -> dict[str, float]:
    """The plugin's charged seconds by class (none for schedulers without its controller)."""
    metrics = getattr(sched, "patched_metrics", None)
    return metrics.compute_seconds() if metrics is not None else {}


def engine_stats(sched: Any, c: TwinCounters, now_s: float) -> EngineStats:
    """The counters and gauges now, as the simulator's core hands them out."""
    running, waiting = sched.get_request_counts()
    controller = _controller(sched)
    cumulative, total = [], 0
    for count in c.iteration:
        total += count
        cumulative.append(total)
    return EngineStats(
        now_s=now_s,
        num_running=running,
        num_waiting=waiting,
        waiting_by_reason={"capacity": waiting, "deferred": 0},
        kv_usage=float(sched.get_kv_cache_usage()),
        num_preemptions=c.preemptions,
        prefix_cache_queries=c.prefix_queries,
        prefix_cache_hits=c.prefix_hits,
        external_prefix_cache_queries=0,
        external_prefix_cache_hits=0,
        generation_tokens=c.generation,
        prompt_tokens=c.prompt,
        prompt_tokens_by_source={
            "local_compute": c.prompt - c.prompt_cached,
            "local_cache_hit": c.prompt_cached,
            "external_kv_transfer": 0,
        },
        prompt_tokens_cached=c.prompt_cached,
        iteration_tokens=HistogramSnapshot(
            ITERATION_TOKEN_BOUNDS, tuple(cumulative), total, c.iteration_sum
        ),
        request_success=dict(c.success),
        compute_s=_compute_seconds(sched),
        prefill_compute_share=float(getattr(controller, "share", 0.0)),
        restores_done=0,
        restores_recomputed=0,
        steps=c.steps,
        empty_steps=c.empty_steps,
        busy_s=c.busy_s,
        gpu_busy=c.gpu_busy,
        vruntime_prefill=float(getattr(controller, "vruntime_prefill", 0.0)),
        vruntime_decode=float(getattr(controller, "vruntime_decode", 0.0)),
    )


def scheduler_state(
    sched: Any, c: TwinCounters, config: TwinConfig, now_s: float, last_s: float, frozen: bool
) -> SimState:
    """The scheduler's state for a forensics bundle, in the simulator's state schema."""
    manager = sched.kv_cache_manager
    controller = _controller(sched)
    running = list(sched.running)

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
            "gpu_busy": c.gpu_busy,
            "empty_steps": c.empty_steps,
            "pool": {
                "num_blocks": config.num_blocks,
                "free": manager.block_pool.get_num_free_blocks(),
                "usage": float(sched.get_kv_cache_usage()),
                "host_blocks": 0,
            },
            "running": [row(r) for r in running],
            "waiting": [row(r) | {"reason": "capacity"} for r in sched.waiting],
        }
    )
