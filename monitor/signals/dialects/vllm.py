"""vLLM's dialect: the `vllm:` families (the scheduler fork's and the simulator's included).

The step counters are the prefix-cache queries (every admission attempt queries the cache),
the iteration-tokens histogram's count (engine steps) and the fork's compute seconds and
step counter; preemptions are counted. Every family is declared when the engine starts, so
a family missing from a page is missing (a core dead behind a live API server), not zero.
"""

from __future__ import annotations

from stallkit.contract import names
from stallkit.monitor.signals.dialects.base import Dialect, Series


class Vllm(Dialect):
    """vLLM (and the scheduler fork, and the simulator's default page)."""

    name = "vllm"
    engine = "vLLM"
    prefixes = (names.VLLM_PREFIX,)
    engine_label = "engine"
    absent_is_zero = False
    series = (
        Series(names.NUM_REQUESTS_RUNNING, "running"),
        Series(names.NUM_REQUESTS_WAITING, "waiting"),
        Series(names.NUM_REQUESTS_WAITING_BY_REASON, "waiting_by_reason", split="reason"),
        Series(names.KV_CACHE_USAGE, "kv_usage"),
        Series(names.GPU_CACHE_USAGE_OLD, "kv_usage_old"),
        Series(names.GENERATION_TOKENS, "gen_tokens", "counter"),
        Series(names.PROMPT_TOKENS, "prompt_tokens", "counter"),
        Series(names.NUM_PREEMPTIONS, "preemptions", "counter"),
        Series(names.PREFIX_CACHE_QUERIES, "prefix_queries", "counter"),
        Series(names.PREFIX_CACHE_HITS, "prefix_hits", "counter"),
        Series(names.REQUEST_SUCCESS, "request_success", "counter", split="finished_reason"),
        Series(names.SCHEDULER_PREFILL_COMPUTE_SHARE, "prefill_compute_share"),
        Series(names.SCHEDULER_COMPUTE_SECONDS, "compute_s", "counter", split="class"),
        Series(names.SCHEDULER_STEPS, "steps", "counter"),
        Series(names.ITERATION_TOKENS, "iterations", "histogram_count"),
    )

    @property
    def group_suffix(self) -> str:
        """vLLM's groups keep the names the rules had before other dialects."""
        return ""

    @property
    def rule_labels(self) -> dict[str, str]:
        """None: vLLM's rules keep the labels they had before other dialects."""
        return {}
