"""Prometheus and DCGM-format metrics of the simulated engine, named as vLLM 0.32 names them.

`SimMetrics` records what the core does not count itself (per-request latency histograms,
iteration sizes, finished requests by reason, GPU busy intervals) from the driver's callbacks,
and renders `/metrics` from those plus the core's `EngineStats`, through prometheus_client's
exposition so the text parses with its parser. Every family carries the labels `model_name`
and `engine` ("0"), counters end in `_total`. `stallkit.contract.names.SIM_VLLM_FAMILIES` lists the
golden vLLM families the simulator fills (tests check it against the golden file and the
served text). Beside its engine clock the page has two families of its own, for the host tier
vLLM does not count: restores by outcome (`stallkit_sim_restores_total`) and the blocks the
tier holds (`stallkit_sim_host_tier_blocks`); a twin with a KV connector fills them too.
With a metric dialect other than vLLM's (`kit sim serve --dialect`), `/metrics` speaks that
engine's names instead (`stallkit.engine.serve.dialect_pages`), so a fleet of simulators can
stand in for SGLang, llama.cpp and TGI servers.
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

from stallkit.contract import names
from stallkit.engine.serve.dialect_pages import DIALECT_PAGES, FinishedCounts
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.core import EngineStats, RequestInfo, StepResult

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
        _HistSpec(names.TIME_TO_FIRST_TOKEN, "Time to first token.", _TTFT_BUCKETS),
        _HistSpec(names.E2E_REQUEST_LATENCY, "End-to-end request latency.", _LATENCY_BUCKETS),
        _HistSpec(names.REQUEST_QUEUE_TIME, "Time spent waiting.", _LATENCY_BUCKETS),
        _HistSpec(names.REQUEST_INFERENCE_TIME, "Time running.", _LATENCY_BUCKETS),
        _HistSpec(names.REQUEST_PREFILL_TIME, "Time in prefill.", _LATENCY_BUCKETS),
        _HistSpec(names.REQUEST_DECODE_TIME, "Time in decode.", _LATENCY_BUCKETS),
        _HistSpec(names.INTER_TOKEN_LATENCY, "Inter-token latency.", _ITL_BUCKETS),
        _HistSpec(
            names.REQUEST_TIME_PER_OUTPUT_TOKEN,
            "Mean time per output token.",
            _ITL_BUCKETS,
        ),
        _HistSpec(names.REQUEST_PROMPT_TOKENS, "Prompt tokens per request.", tokens),
        _HistSpec(names.REQUEST_GENERATION_TOKENS, "Generated tokens per request.", tokens),
        _HistSpec(
            names.REQUEST_MAX_NUM_GENERATION_TOKENS, "Max generated tokens per request.", tokens
        ),
        _HistSpec(names.REQUEST_PARAMS_MAX_TOKENS, "The max_tokens request parameter.", tokens),
        _HistSpec(names.REQUEST_PARAMS_N, "The n request parameter.", (1.0, 2.0, 5.0, 10.0, 20.0)),
        _HistSpec(
            names.REQUEST_PREFILL_KV_COMPUTED_TOKENS,
            "Prompt tokens computed (not cached).",
            tokens,
        ),
        _HistSpec(
            names.REQUEST_NUM_PREEMPTIONS,
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

    def __init__(
        self,
        config: SimConfig,
        time_scale: float,
        step_counter: bool = False,
        dialect: names.DialectName = "vllm",
    ) -> None:
        self.config = config
        self.time_scale = time_scale
        self.dialect: names.DialectName = dialect
        #: what other engines count when a request finishes: requests and their tokens
        self.finished = FinishedCounts()
        #: steps by (turn, empty), served as `vllm:scheduler_steps_total` (the twin's core;
        #: the simulator's page has no step counter, as the fork's images have none)
        self.steps: dict[tuple[str, str], int] | None = {} if step_counter else None
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
        if self.steps is not None:
            key = (result.turn, "true" if result.scheduled_tokens == 0 else "false")
            self.steps[key] = self.steps.get(key, 0) + 1

    def on_tokens(self, request_id: str, count: int, now_s: float) -> None:
        meta = self._requests.get(request_id)
        if meta is None:
            return
        if meta.last_token_s is None:
            self.hists[names.TIME_TO_FIRST_TOKEN].observe(now_s - meta.arrival_s)
        else:
            self.hists[names.INTER_TOKEN_LATENCY].observe(now_s - meta.last_token_s)
        meta.last_token_s = now_s

    def on_finished(
        self, request_id: str, reason: str, info: RequestInfo | None, now_s: float
    ) -> None:
        meta = self._requests.pop(request_id, None)
        if meta is None or info is None:
            return
        self.finished.add(info.prompt_tokens, info.output_tokens)
        h = self.hists
        end_s = info.finished_s if info.finished_s is not None else now_s
        h[names.E2E_REQUEST_LATENCY].observe(end_s - meta.arrival_s)
        h[names.REQUEST_PROMPT_TOKENS].observe(info.prompt_tokens)
        h[names.REQUEST_GENERATION_TOKENS].observe(info.output_tokens)
        h[names.REQUEST_MAX_NUM_GENERATION_TOKENS].observe(info.output_tokens)
        h[names.REQUEST_PARAMS_MAX_TOKENS].observe(meta.max_tokens)
        h[names.REQUEST_PARAMS_N].observe(1)
        h[names.REQUEST_NUM_PREEMPTIONS].observe(info.num_preemptions)
        scheduled = info.first_scheduled_s
        if scheduled is not None:
            h[names.REQUEST_QUEUE_TIME].observe(scheduled - meta.arrival_s)
            h[names.REQUEST_INFERENCE_TIME].observe(end_s - scheduled)
            h[names.REQUEST_PREFILL_KV_COMPUTED_TOKENS].observe(
                info.prompt_tokens - info.cached_prompt_tokens
            )
        first = info.first_token_s
        if first is not None and scheduled is not None:
            h[names.REQUEST_PREFILL_TIME].observe(first - scheduled)
            h[names.REQUEST_DECODE_TIME].observe(end_s - first)
            if info.output_tokens > 1:
                tpot = (end_s - first) / (info.output_tokens - 1)
                h[names.REQUEST_TIME_PER_OUTPUT_TOKEN].observe(tpot)

    # -- rendering --------------------------------------------------------------------------
    def _families(self, stats: EngineStats, now_s: float) -> list[Metric]:
        f = _Families(self.config.model_name)
        cfg = self.config
        cache = {"block_size": str(cfg.block_size), "num_gpu_blocks": str(cfg.num_blocks)}
        cache |= {"enable_prefix_caching": "True", "cache_dtype": "auto"}
        awake = {"awake": 1, "weights_offloaded": 0, "discard_all": 0}
        gauges = [
            (names.NUM_REQUESTS_RUNNING, "Requests in the running batch.", stats.num_running),
            (names.NUM_REQUESTS_WAITING, "Requests waiting to be processed.", stats.num_waiting),
            (names.KV_CACHE_USAGE, "KV-cache usage. 1 means 100 percent.", stats.kv_usage),
            (names.SCHEDULER_PREFILL_COMPUTE_SHARE, "Prefill's share of contended compute "
             "(0 = off).", stats.prefill_compute_share),
            (names.SIM_ENGINE_TIME, "Simulator only: engine seconds since start.", now_s),
            (names.SIM_TIME_SCALE, "Simulator only: engine seconds per wall second.",
             self.time_scale),
        ]  # fmt: skip
        counters = [
            (names.NUM_PREEMPTIONS, "Cumulative preemptions.", stats.num_preemptions),
            (names.PREFIX_CACHE_QUERIES, "Prefix cache queries, in tokens.",
             stats.prefix_cache_queries),
            (names.PREFIX_CACHE_HITS, "Prefix cache hits, in tokens.", stats.prefix_cache_hits),
            (names.EXTERNAL_PREFIX_CACHE_QUERIES, "External (host tier) prefix cache queries, "
             "in tokens.", stats.external_prefix_cache_queries),
            (names.EXTERNAL_PREFIX_CACHE_HITS, "External (host tier) prefix cache hits, "
             "in tokens.", stats.external_prefix_cache_hits),
            (names.PROMPT_TOKENS, "Prefill tokens processed.", stats.prompt_tokens),
            (names.GENERATION_TOKENS, "Generation tokens processed.", stats.generation_tokens),
            (names.PROMPT_TOKENS_CACHED, "Cached prompt tokens.", stats.prompt_tokens_cached),
        ]  # fmt: skip
        gauges.insert(-2, (names.SIM_HOST_TIER_BLOCKS, "Simulator and twin only: KV blocks the "
                           "host tier holds.", stats.host_tier_blocks))  # fmt: skip
        cache_info = f.info(
            names.CACHE_CONFIG_INFO, "Information of the LLMEngine CacheConfig.", cache
        )
        if not stats.core_alive:  # the server's own families only: the engine's went with it
            return [cache_info, *(f.scalar(GaugeMetricFamily, *g) for g in gauges[-2:])]
        sources = {"local_compute": 0, "local_cache_hit": 0, "external_kv_transfer": 0}
        iteration = stats.iteration_tokens
        out = [
            cache_info,
            f.labelled(GaugeMetricFamily, names.ENGINE_SLEEP_STATE, "Engine sleep state.",
                       "sleep_state", awake),
            f.labelled(GaugeMetricFamily, names.NUM_REQUESTS_WAITING_BY_REASON,
                       "Waiting requests by reason.", "reason",
                       {"capacity": 0, "deferred": 0} | stats.waiting_by_reason),
            f.labelled(CounterMetricFamily, names.PROMPT_TOKENS_BY_SOURCE,
                       "Prompt tokens by source.", "source",
                       sources | stats.prompt_tokens_by_source),
            f.labelled(CounterMetricFamily, names.REQUEST_SUCCESS,
                       "Successfully processed requests.", "finished_reason",
                       dict.fromkeys(FINISH_REASONS, 0) | stats.request_success),
            f.labelled(CounterMetricFamily, names.SCHEDULER_COMPUTE_SECONDS,
                       "Engine seconds of compute by class.", "class",
                       {"prefill": 0.0, "decode": 0.0} | stats.compute_s),
            f.histogram(names.ITERATION_TOKENS, "Tokens per engine step.",
                        iteration.buckets(), iteration.sum),
            f.labelled(CounterMetricFamily, names.SIM_RESTORES, "Simulator and twin only: "
                       "restores from the host tier, loaded or recomputed after their max wait.",
                       "outcome", {"loaded": stats.restores_done,
                                   "recomputed": stats.restores_recomputed}),
        ]  # fmt: skip
        if self.steps is not None:
            steps = CounterMetricFamily(
                names.SCHEDULER_STEPS.removesuffix("_total"),
                "Scheduler steps by turn, and whether the step scheduled nothing.",
                labels=["model_name", "engine", "turn", "empty"],
            )
            for (turn, empty), count in sorted(self.steps.items()):
                steps.add_metric([*self._labels, turn, empty], count)
            out.append(steps)
        out += [f.scalar(GaugeMetricFamily, *gauge) for gauge in gauges]
        out += [f.scalar(CounterMetricFamily, *counter) for counter in counters]
        for spec in self._specs:
            hist = self.hists[spec.name]
            out.append(f.histogram(spec.name, spec.help, hist.buckets(), hist.total))
        return out

    def render(self, stats: EngineStats, now_s: float) -> bytes:
        """The /metrics text (Prometheus exposition format 0.0.4), in the engine's dialect."""
        other = DIALECT_PAGES.get(self.dialect)
        if other is not None:
            return other(stats, self.finished, self._clock(now_s), self.config.model_name)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(self._families(stats, now_s)))
        return generate_latest(registry)

    def _clock(self, now_s: float) -> tuple[float, float]:
        return now_s, self.time_scale

    def render_dcgm(self, now_s: float, hostname: str = "stallkit-sim") -> bytes:
        """DCGM exporter text for each simulated GPU: `DCGM_FI_DEV_GPU_UTIL` (0..100), and the
        power draw and SM activity that go with it (a busy GPU draws power and keeps its SMs
        active: from `DCGM_IDLE_W` idle to `DCGM_BUSY_W` at full use)."""
        share = self.busy.share(now_s)
        families = (
            (names.DCGM_GPU_UTIL, "GPU utilization (in %).", f"{round(100.0 * share)}"),
            (names.DCGM_POWER_USAGE, "Power draw (in W).", f"{_dcgm_watts(share):.1f}"),
            (names.DCGM_SM_ACTIVE, "Ratio of cycles an SM has a warp resident.", f"{share:.3f}"),
        )
        lines: list[str] = []
        for name, help_text, value in families:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
            for gpu in range(self.config.num_gpus):
                lines.append(
                    f'{name}{{gpu="{gpu}",UUID="GPU-sim-{gpu:04d}",device="nvidia{gpu}",'
                    f'modelName="{self.config.model_name}",Hostname="{hostname}"}} {value}'
                )
        return ("\n".join(lines) + "\n").encode()


#: the simulated GPUs' power draw idle and at full use (watts; an H100 PCIe's range)
DCGM_IDLE_W, DCGM_BUSY_W = 60.0, 350.0


def _dcgm_watts(share: float) -> float:
    return DCGM_IDLE_W + (DCGM_BUSY_W - DCGM_IDLE_W) * share


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
