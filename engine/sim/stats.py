"""The engine's running counters, and their frozen snapshot (`EngineStats`) for /metrics."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import accumulate

from stallkit.engine.core.records import ITERATION_TOKEN_BOUNDS, EngineStats, HistogramSnapshot


@dataclass
class Counters:
    """Monotonic counters the scheduler bumps in place (cheap: plain attributes)."""

    num_preemptions: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    external_queries: int = 0
    external_hits: int = 0
    generation_tokens: int = 0
    prompt_tokens: int = 0
    prompt_local_compute: int = 0
    prompt_local_cache_hit: int = 0
    prompt_external: int = 0
    request_success: dict[str, int] = field(default_factory=dict)
    compute_prefill_s: float = 0.0
    compute_decode_s: float = 0.0
    restores_done: int = 0
    restores_recomputed: int = 0
    steps: int = 0
    empty_steps: int = 0
    busy_s: float = 0.0
    iteration_counts: list[int] = field(
        default_factory=lambda: [0] * (len(ITERATION_TOKEN_BOUNDS) + 1)
    )
    iteration_sum: int = 0

    def observe_iteration(self, tokens: int) -> None:
        """One non-empty step scheduled `tokens` tokens."""
        self.iteration_counts[bisect_left(ITERATION_TOKEN_BOUNDS, tokens)] += 1
        self.iteration_sum += tokens

    def count_prompt(self, prompt: int, local_hit: int, external: int) -> None:
        """A request's first scheduling: its prompt tokens by where their KV came from."""
        local_hit = min(local_hit, prompt)
        external = min(external, prompt - local_hit)
        self.prompt_tokens += prompt
        self.prompt_local_cache_hit += local_hit
        self.prompt_external += external
        self.prompt_local_compute += prompt - local_hit - external

    def snapshot(
        self,
        *,
        now_s: float,
        running: int,
        waiting: int,
        deferred: int,
        kv_usage: float,
        share: float,
        gpu_busy: bool,
        vruntimes: tuple[float, float],
        host_tier_blocks: int = 0,
    ) -> EngineStats:
        """Freeze the counters together with the engine's gauges."""
        cumulative = tuple(accumulate(self.iteration_counts))
        return EngineStats(
            now_s=now_s,
            num_running=running,
            num_waiting=waiting,
            waiting_by_reason={"capacity": waiting - deferred, "deferred": deferred},
            kv_usage=kv_usage,
            num_preemptions=self.num_preemptions,
            prefix_cache_queries=self.prefix_cache_queries,
            prefix_cache_hits=self.prefix_cache_hits,
            external_prefix_cache_queries=self.external_queries,
            external_prefix_cache_hits=self.external_hits,
            generation_tokens=self.generation_tokens,
            prompt_tokens=self.prompt_tokens,
            prompt_tokens_by_source={
                "local_compute": self.prompt_local_compute,
                "local_cache_hit": self.prompt_local_cache_hit,
                "external_kv_transfer": self.prompt_external,
            },
            prompt_tokens_cached=self.prompt_local_cache_hit + self.prompt_external,
            iteration_tokens=HistogramSnapshot(
                bounds=ITERATION_TOKEN_BOUNDS,
                bucket_counts=cumulative,
                count=cumulative[-1],
                sum=float(self.iteration_sum),
            ),
            request_success=dict(self.request_success),
            compute_s={"prefill": self.compute_prefill_s, "decode": self.compute_decode_s},
            prefill_compute_share=share,
            restores_done=self.restores_done,
            restores_recomputed=self.restores_recomputed,
            steps=self.steps,
            empty_steps=self.empty_steps,
            busy_s=self.busy_s,
            gpu_busy=gpu_busy,
            vruntime_prefill=vruntimes[0],
            vruntime_decode=vruntimes[1],
            host_tier_blocks=host_tier_blocks,
        )
