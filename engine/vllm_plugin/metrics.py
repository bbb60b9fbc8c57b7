"""The patched scheduler's Prometheus metrics, made in vLLM's engine-core process.

vLLM's `/metrics` page is served by the API server process; metrics made in the engine-core
process reach it only through prometheus_client's multiprocess mode, which the launcher
switches on by setting `PROMETHEUS_MULTIPROC_DIR` to a fresh directory before the engine
starts (gauges then need a multiprocess mode: the most recent value wins). Without that
variable the values still count in this process, which is what the in-process tests read.

- `vllm:scheduler_prefill_compute_share`: the configured share (gauge)
- `vllm:scheduler_compute_seconds_total{class}`: seconds charged to `prefill` / `decode`
- `vllm:scheduler_steps_total{turn,empty}`: every step by its turn and whether it scheduled
  nothing; in a livelock this is the one counter that moves
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from stallkit.contract import names
from stallkit.engine.policy.controller import Turn


class SchedulerMetrics:
    """The three families, labelled like vLLM's own (`model_name`, `engine`)."""

    def __init__(self, model_name: str, engine: str, prefill_share: float) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["model_name", "engine"]
        self._base = {"model_name": model_name, "engine": engine}
        share = Gauge(
            names.SCHEDULER_PREFILL_COMPUTE_SHARE,
            "Prefill's share of scheduler compute time (the patched scheduler's setting).",
            labels,
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        share.labels(**self._base).set(prefill_share)
        self._compute = Counter(
            names.SCHEDULER_COMPUTE_SECONDS,
            "Engine seconds of contended steps charged to each scheduler class.",
            [*labels, "class"],
            registry=self.registry,
        )
        self._steps = Counter(
            names.SCHEDULER_STEPS,
            "Scheduler steps by turn, and whether the step scheduled nothing.",
            [*labels, "turn", "empty"],
            registry=self.registry,
        )
        for cls in ("prefill", "decode"):
            self._compute.labels(**self._base, **{"class": cls})
            for empty in ("true", "false"):
                self._steps.labels(**self._base, turn=cls, empty=empty)

    def step(self, turn: Turn, empty: bool, count: int = 1) -> None:
        """Count one scheduled step (or `count` identical ones)."""
        empty_label = "true" if empty else "false"
        self._steps.labels(**self._base, turn=turn, empty=empty_label).inc(count)

    def compute_seconds(self) -> dict[str, float]:
        """The seconds charged so far, by class."""
        return {
            sample.labels["class"]: float(sample.value)
            for metric in self._compute.collect()
            for sample in metric.samples
            if sample.name.endswith("_total")
        }

    def charge(self, turn: Turn, elapsed_s: float) -> None:
        """Add a contended step's seconds to its class."""
        if turn != "none" and elapsed_s > 0:
            self._compute.labels(**self._base, **{"class": turn}).inc(elapsed_s)
