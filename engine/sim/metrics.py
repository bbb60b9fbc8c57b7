"""Prometheus and DCGM-format metrics of the simulated engine, named as vLLM 0.32 names them.

`SimMetrics` records what the core does not count itself (per-request latency histograms,
iteration sizes, finished requests by reason, GPU busy intervals) from the driver's callbacks,
and renders `/metrics` from those plus the core's `EngineStats`, through prometheus_client's
exposition so the text parses with its parser. Every family carries the labels `model_name`
and `engine` ("0"), counters end in `_total`. `CLAIMED_FAMILIES` lists the golden vLLM
families the simulator fills (tests check it against the golden file and the served text).
`/dcgm/metrics` renders `DCGM_FI_DEV_GPU_UTIL` per simulated GPU: the share of the recent
engine time spent in steps that ran work (0 while idle, spinning or frozen).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from engine.sim.config import SimConfig
from engine.sim.core import EngineStats, RequestInfo, StepResult

#: Golden vLLM families (as in vllm-0.32-metric-families.txt, counters with `_total`) served here.
CLAIMED_FAMILIES: frozenset[str] = frozenset(
    {
        "vllm:cache_config_info",
        "vllm:e2e_request_latency_seconds",
        "vllm:engine_sleep_state",
        "vllm:external_prefix_cache_hits_total",
        "vllm:external_prefix_cache_queries_total",
        "vllm:generation_tokens_total",
        "vllm:inter_token_latency_seconds",
        "vllm:iteration_tokens_total",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_requests_waiting_by_reason",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prompt_tokens_by_source_total",
        "vllm:prompt_tokens_cached_total",
        "vllm:prompt_tokens_total",
        "vllm:request_decode_time_seconds",
        "vllm:request_generation_tokens",
        "vllm:request_inference_time_seconds",
        "vllm:request_max_num_generation_tokens",
        "vllm:request_num_preemptions",
        "vllm:request_params_max_tokens",
        "vllm:request_params_n",
        "vllm:request_prefill_kv_computed_tokens",
        "vllm:request_prefill_time_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_queue_time_seconds",
        "vllm:request_success_total",
        "vllm:request_time_per_output_token_seconds",
        "vllm:time_to_first_token_seconds",
    }
)
#: The fork's scheduler families (not in upstream vLLM).
FORK_FAMILIES: frozenset[str] = frozenset(
    {"vllm:scheduler_prefill_compute_share", "vllm:scheduler_compute_seconds_total"}
)

_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
FINISH_REASONS = ("stop", "length", "abort", "error")


def token_buckets(max_value: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 buckets up to `max_value` (for token-count histograms)."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(out)
            out.append(float(value))
        exponent += 1


class Histogram:
    """A cumulative-bucket histogram that costs one bisect per observation."""

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            out.append((repr(float(bound)), float(running)))
        out.append(("+Inf", float(self.count)))
        return out


@dataclass
class _RequestMeta:
    arrival_s: float
    max_tokens: int
    last_token_s: float | None = None


@dataclass(frozen=True)
class _HistSpec:
    name: str
    help: str
    bounds: tuple[float, ...]


def _hist_specs(max_model_len: int) -> list[_HistSpec]:
    tokens = token_buckets(max_model_len)
    return [
        _HistSpec("vllm:time_to_first_token_seconds", "Time to first token.", _TTFT_BUCKETS),
        _HistSpec(
            "vllm:e2e_request_latency_seconds", "End-to-end request latency.", _LATENCY_BUCKETS
        ),
        _HistSpec("vllm:request_queue_time_seconds", "Time spent waiting.", _LATENCY_BUCKETS),
        _HistSpec("vllm:request_inference_time_seconds", "Time running.", _LATENCY_BUCKETS),
        _HistSpec("vllm:request_prefill_time_seconds", "Time in prefill.", _LATENCY_BUCKETS),
        _HistSpec("vllm:request_decode_time_seconds", "Time in decode.", _LATENCY_BUCKETS),
        _HistSpec("vllm:inter_token_latency_seconds", "Inter-token latency.", _ITL_BUCKETS),
        _HistSpec(
            "vllm:request_time_per_output_token_seconds",
            "Mean time per output token.",
            _ITL_BUCKETS,
        ),
        _HistSpec("vllm:request_prompt_tokens", "Prompt tokens per request.", tokens),
        _HistSpec("vllm:request_generation_tokens", "Generated tokens per request.", tokens),
        _HistSpec(
            "vllm:request_max_num_generation_tokens", "Max generated tokens per request.", tokens
        ),
        _HistSpec("vllm:request_params_max_tokens", "The max_tokens request parameter.", tokens),
        _HistSpec("vllm:request_params_n", "The n request parameter.", (1.0, 2.0, 5.0, 10.0, 20.0)),
        _HistSpec(
            "vllm:request_prefill_kv_computed_tokens",
            "Prompt tokens computed (not cached).",
            tokens,
        ),
        _HistSpec(
            "vllm:request_num_preemptions",
            "Preemptions per request.",
            (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0),
        ),
    ]


class BusyWindow:
    """GPU-busy engine time within a trailing window, from merged busy intervals."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._spans: deque[list[float]] = deque()

    def add(self, start_s: float, end_s: float) -> None:
        if self._spans and self._spans[-1][1] >= start_s:
            self._spans[-1][1] = max(self._spans[-1][1], end_s)
        else:
            self._spans.append([start_s, end_s])
        self._prune(end_s)

    def _prune(self, now_s: float) -> None:
        cutoff = now_s - self.window_s
        while self._spans and self._spans[0][1] <= cutoff:
            self._spans.popleft()

    def share(self, now_s: float) -> float:
        self._prune(now_s)
        lo = now_s - self.window_s
        busy = sum(max(0.0, min(end, now_s) - max(start, lo)) for start, end in self._spans)
        return min(1.0, busy / self.window_s)


class SimMetrics:
    """Per-request and per-step recordings of one engine, and the two metric renderings."""

    def __init__(self, config: SimConfig, time_scale: float) -> None:
        self.config = config
        self._labels = [config.model_name, "0"]
        self._specs = _hist_specs(config.max_model_len)
        self.hists = {spec.name: Histogram(spec.bounds) for spec in self._specs}
        self._requests: dict[str, _RequestMeta] = {}
        # "Recent" for GPU utilisation: one wall second of engine time (a DCGM sample period).
        self.busy = BusyWindow(max(1.0, time_scale))

    # -- recording (driver callbacks) -------------------------------------------------------
    def on_added(self, request_id: str, now_s: float, max_tokens: int) -> None:
        self._requests[request_id] = _RequestMeta(now_s, max_tokens)

    def on_step(self, result: StepResult, start_s: float, end_s: float) -> None:
        if result.gpu_busy:
            self.busy.add(start_s, end_s)

    def on_tokens(self, request_id: str, count: int, now_s: float) -> None:
        meta = self._requests.get(request_id)
        if meta is None:
            return
        if meta.last_token_s is None:
            self.hists["vllm:time_to_first_token_seconds"].observe(now_s - meta.arrival_s)
        else:
            self.hists["vllm:inter_token_latency_seconds"].observe(now_s - meta.last_token_s)
        meta.last_token_s = now_s

    def on_finished(
        self, request_id: str, reason: str, info: RequestInfo | None, now_s: float
    ) -> None:
        meta = self._requests.pop(request_id, None)
        if meta is None or info is None:
            return
        h = self.hists
        end_s = info.finished_s if info.finished_s is not None else now_s
        h["vllm:e2e_request_latency_seconds"].observe(end_s - meta.arrival_s)
        h["vllm:request_prompt_tokens"].observe(info.prompt_tokens)
        h["vllm:request_generation_tokens"].observe(info.output_tokens)
        h["vllm:request_max_num_generation_tokens"].observe(info.output_tokens)
        h["vllm:request_params_max_tokens"].observe(meta.max_tokens)
        h["vllm:request_params_n"].observe(1)
        h["vllm:request_num_preemptions"].observe(info.num_preemptions)
        scheduled = info.first_scheduled_s
        if scheduled is not None:
            h["vllm:request_queue_time_seconds"].observe(scheduled - meta.arrival_s)
            h["vllm:request_inference_time_seconds"].observe(end_s - scheduled)
            h["vllm:request_prefill_kv_computed_tokens"].observe(
                info.prompt_tokens - info.cached_prompt_tokens
            )
        first = info.first_token_s
        if first is not None and scheduled is not None:
            h["vllm:request_prefill_time_seconds"].observe(first - scheduled)
            h["vllm:request_decode_time_seconds"].observe(end_s - first)
            if info.output_tokens > 1:
                tpot = (end_s - first) / (info.output_tokens - 1)
                h["vllm:request_time_per_output_token_seconds"].observe(tpot)

    # -- rendering --------------------------------------------------------------------------
    def _families(self, stats: EngineStats, now_s: float) -> list[Metric]:
        f = _Families(self.config.model_name)
        cfg = self.config
        cache = {"block_size": str(cfg.block_size), "num_gpu_blocks": str(cfg.num_blocks)}
        cache |= {"enable_prefix_caching": "True", "cache_dtype": "auto"}
        awake = {"awake": 1, "weights_offloaded": 0, "discard_all": 0}
        gauges = [
            ("vllm:num_requests_running", "Requests in the running batch.", stats.num_running),
            ("vllm:num_requests_waiting", "Requests waiting to be processed.", stats.num_waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent.", stats.kv_usage),
            ("vllm:scheduler_prefill_compute_share", "Prefill's share of contended compute "
             "(0 = off).", stats.prefill_compute_share),
            (ENGINE_TIME_FAMILY, "Simulator only: engine seconds since start.", now_s),
        ]  # fmt: skip
        counters = [
            ("vllm:num_preemptions", "Cumulative preemptions.", stats.num_preemptions),
            ("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.",
             stats.prefix_cache_queries),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", stats.prefix_cache_hits),
            ("vllm:external_prefix_cache_queries", "External (host tier) prefix cache queries, "
             "in tokens.", stats.external_prefix_cache_queries),
            ("vllm:external_prefix_cache_hits", "External (host tier) prefix cache hits, "
             "in tokens.", stats.external_prefix_cache_hits),
            ("vllm:prompt_tokens", "Prefill tokens processed.", stats.prompt_tokens),
            ("vllm:generation_tokens", "Generation tokens processed.", stats.generation_tokens),
            ("vllm:prompt_tokens_cached", "Cached prompt tokens.", stats.prompt_tokens_cached),
        ]  # fmt: skip
        sources = {"local_compute": 0, "local_cache_hit": 0, "external_kv_transfer": 0}
        iteration = stats.iteration_tokens
        out = [
            f.info("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.", cache),
            f.labelled(GaugeMetricFamily, "vllm:engine_sleep_state", "Engine sleep state.",
                       "sleep_state", awake),
            f.labelled(GaugeMetricFamily, "vllm:num_requests_waiting_by_reason",
                       "Waiting requests by reason.", "reason",
                       {"capacity": 0, "deferred": 0} | stats.waiting_by_reason),
            f.labelled(CounterMetricFamily, "vllm:prompt_tokens_by_source",
                       "Prompt tokens by source.", "source",
                       sources | stats.prompt_tokens_by_source),
            f.labelled(CounterMetricFamily, "vllm:request_success",
                       "Successfully processed requests.", "finished_reason",
                       dict.fromkeys(FINISH_REASONS, 0) | stats.request_success),
            f.labelled(CounterMetricFamily, "vllm:scheduler_compute_seconds",
                       "Engine seconds of compute by class.", "class",
                       {"prefill": 0.0, "decode": 0.0} | stats.compute_s),
            f.histogram("vllm:iteration_tokens_total", "Tokens per engine step.",
                        iteration.buckets(), iteration.sum),
        ]  # fmt: skip
        out += [f.scalar(GaugeMetricFamily, *gauge) for gauge in gauges]
        out += [f.scalar(CounterMetricFamily, *counter) for counter in counters]
        for spec in self._specs:
            hist = self.hists[spec.name]
            out.append(f.histogram(spec.name, spec.help, hist.buckets(), hist.total))
        return out

    def render(self, stats: EngineStats, now_s: float) -> bytes:
        """The /metrics text (Prometheus exposition format 0.0.4)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(self._families(stats, now_s)))
        return generate_latest(registry)

    def render_dcgm(self, now_s: float, hostname: str = "stallkit-sim") -> bytes:
        """DCGM exporter text: `DCGM_FI_DEV_GPU_UTIL` (0..100) for each simulated GPU."""
        util = round(100.0 * self.busy.share(now_s))
        lines = [
            "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
            "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        ]
        for gpu in range(self.config.num_gpus):
            lines.append(
                f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-sim-{gpu:04d}",device="nvidia{gpu}",'
                f'modelName="{self.config.model_name}",Hostname="{hostname}"}} {util}'
            )
        return ("\n".join(lines) + "\n").encode()


#: Engine time gauge (simulator only, not a vLLM name): benchmarks read it.
ENGINE_TIME_FAMILY = "stallkit_sim_engine_time_seconds"


class _Families:
    """Builds metric families that all carry the labels `model_name` and `engine`."""

    def __init__(self, model_name: str) -> None:
        self.keys = ["model_name", "engine"]
        self.values = [model_name, "0"]

    def scalar(
        self, cls: type[GaugeMetricFamily | CounterMetricFamily], name: str, doc: str, value: float
    ) -> Metric:
        family = cls(name, doc, labels=self.keys)
        family.add_metric(self.values, float(value))
        return family

    def labelled(
        self,
        cls: type[GaugeMetricFamily | CounterMetricFamily],
        name: str,
        doc: str,
        key: str,
        values: Mapping[str, float],
    ) -> Metric:
        family = cls(name, doc, labels=[*self.keys, key])
        for label, value in values.items():
            family.add_metric([*self.values, label], float(value))
        return family

    def info(self, name: str, doc: str, labels: Mapping[str, str]) -> Metric:
        family = GaugeMetricFamily(name, doc, labels=[*self.keys, *labels])
        family.add_metric([*self.values, *labels.values()], 1.0)
        return family

    def histogram(
        self, name: str, doc: str, buckets: Sequence[tuple[str, float]], total: float
    ) -> Metric:
        family = HistogramMetricFamily(name, doc, labels=self.keys)
        family.add_metric(self.values, list(buckets), sum_value=total)
        return family


class _Snapshot(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)
