"""Turn a vLLM `/metrics` page into a typed snapshot of the signals the monitor reads.

Pure: text in, `MetricsSnapshot` out. Only the sample lines of the families the monitor
reads are handed to prometheus_client's text parser; a real page is mostly histogram buckets
and process metrics, and parsing all of it costs ten times more than the rest of a tick.
Matching is on sample names, which keep their `_total` suffix whatever the parser does to
family names, and both the `_total` and the bare name are accepted. Values are summed over
the `engine` label (data-parallel engines) and each engine's view is kept; a name the
engine does not export stays `None`, never zero. The simulator's own clock (its engine time
and time scale, which no real engine exports) is kept apart as `sim_clock`: it is one clock
per server, not summed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from prometheus_client.parser import text_string_to_metric_families

from stallkit.contract import names
from stallkit.monitor.errors import MonitorError

#: Family -> (field, label that splits it or ""); counters match with and without `_total`.
_FAMILIES: dict[str, tuple[str, str]] = {
    names.NUM_REQUESTS_RUNNING: ("running", ""),
    names.NUM_REQUESTS_WAITING: ("waiting", ""),
    names.NUM_REQUESTS_WAITING_BY_REASON: ("waiting_by_reason", "reason"),
    names.KV_CACHE_USAGE: ("kv_usage", ""),
    names.GPU_CACHE_USAGE_OLD: ("kv_usage_old", ""),
    names.GENERATION_TOKENS: ("gen_tokens", ""),
    names.PROMPT_TOKENS: ("prompt_tokens", ""),
    names.NUM_PREEMPTIONS: ("preemptions", ""),
    names.PREFIX_CACHE_QUERIES: ("prefix_queries", ""),
    names.PREFIX_CACHE_HITS: ("prefix_hits", ""),
    names.REQUEST_SUCCESS: ("request_success", "finished_reason"),
    names.SCHEDULER_PREFILL_COMPUTE_SHARE: ("prefill_compute_share", ""),
    names.SCHEDULER_COMPUTE_SECONDS: ("compute_s", "class"),
    names.SCHEDULER_STEPS: ("steps", ""),
}
#: Sample name -> (field, label that splits it or "").
_SAMPLES: dict[str, tuple[str, str]] = {}
for _name, _target in _FAMILIES.items():
    _SAMPLES[_name] = _SAMPLES[names.bare(_name)] = _target
# engine steps: the iteration-tokens histogram's count (older pages drop the `_total`)
for _name in (names.ITERATION_TOKENS, names.bare(names.ITERATION_TOKENS)):
    _SAMPLES[names.sample(_name, "count")] = ("iterations", "")
#: the simulator's own gauges: read into `SimClock`, not into `EngineMetrics`
_SIM_CLOCK = {names.SIM_ENGINE_TIME: "sim_engine_s", names.SIM_TIME_SCALE: "sim_scale"}
_SAMPLES.update({name: (target, "") for name, target in _SIM_CLOCK.items()})
_PREFIXES = tuple(_SAMPLES)


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """The monitor's signals for one engine (or summed over engines); None = not exported."""

    running: int | None = None
    waiting: int | None = None
    waiting_capacity: int | None = None
    waiting_deferred: int | None = None
    kv_usage: float | None = None  # 0..1
    gen_tokens: float | None = None
    prompt_tokens: float | None = None
    preemptions: float | None = None
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    request_success: Mapping[str, float] | None = None  # by finished_reason
    iterations: float | None = None  # engine steps: the iteration-tokens histogram count
    prefill_compute_share: float | None = None
    compute_s: Mapping[str, float] | None = None  # by scheduler class
    steps: float | None = None  # scheduler steps, empty ones included (patched scheduler)

    @property
    def is_vllm(self) -> bool:
        """Whether the page carries the vLLM signals a stall is judged on."""
        return self.gen_tokens is not None and (
            self.running is not None or self.waiting is not None
        )

    @property
    def compute_s_total(self) -> float | None:
        """Scheduler compute seconds over all classes (fork only)."""
        return None if self.compute_s is None else sum(self.compute_s.values())


@dataclass(frozen=True, slots=True)
class SimClock:
    """The simulator's own clock as its page states it (real engines export none).

    `engine_s` is its engine time (seconds since it started), which falls behind
    `scale` x the wall clock when the simulator is starved of CPU.
    """

    engine_s: float
    scale: float  # engine seconds per wall second (nominal)


@dataclass(frozen=True, slots=True)
class MetricsSnapshot(EngineMetrics):
    """One scrape: totals over engines plus each engine's own view, keyed by engine label."""

    engines: Mapping[str, EngineMetrics] = field(default_factory=dict)
    sim_clock: SimClock | None = None  # None: not a simulator (the wall clock is its clock)


_Raw = dict[str, float | dict[str, float]]


def _select_lines(text: str) -> str:
    """Keep only the sample lines of the families read (no HELP/TYPE: parsed as untyped)."""
    keep = []
    for line in text.splitlines():
        if line.startswith(_PREFIXES):
            cut = len(line)
            for sep in ("{", " "):
                pos = line.find(sep)
                if 0 <= pos < cut:
                    cut = pos
            if line[:cut] in _SAMPLES:
                keep.append(line)
    keep.append("")
    return "\n".join(keep)


def _add(per_engine: dict[str, _Raw], name: str, labels: Mapping[str, str], value: float) -> None:
    """Add one sample of a read family to its engine's raw fields."""
    field_name, split = _SAMPLES[name]
    raw = per_engine.setdefault(labels.get("engine", "0"), {})
    if split:
        sub = raw.setdefault(field_name, {})
        assert isinstance(sub, dict)
        key = labels.get(split, "")
        sub[key] = sub.get(key, 0.0) + value
    else:
        old = raw.get(field_name, 0.0)
        assert isinstance(old, float)
        raw[field_name] = old + value


def _collect(text: str) -> dict[str, _Raw]:
    """Per engine label: field -> value, or field -> {label value: value}."""
    per_engine: dict[str, _Raw] = {}
    try:
        for family in text_string_to_metric_families(_select_lines(text)):
            for sample in family.samples:
                _add(per_engine, sample.name, sample.labels, sample.value)
    except (ValueError, KeyError, IndexError) as exc:
        raise MonitorError(f"malformed /metrics text: {exc}") from None
    return per_engine


def _engine(raw: _Raw) -> EngineMetrics:
    def num(name: str) -> float | None:
        v = raw.get(name)
        return v if isinstance(v, float) else None

    def count(name: str) -> int | None:
        v = num(name)
        return None if v is None else round(v)

    def split(name: str) -> dict[str, float] | None:
        v = raw.get(name)
        return dict(v) if isinstance(v, dict) else None

    reasons = split("waiting_by_reason")
    kv = num("kv_usage")
    return EngineMetrics(
        running=count("running"),
        waiting=count("waiting"),
        waiting_capacity=None if reasons is None else round(reasons.get("capacity", 0.0)),
        waiting_deferred=None if reasons is None else round(reasons.get("deferred", 0.0)),
        kv_usage=kv if kv is not None else num("kv_usage_old"),
        gen_tokens=num("gen_tokens"),
        prompt_tokens=num("prompt_tokens"),
        preemptions=num("preemptions"),
        prefix_queries=num("prefix_queries"),
        prefix_hits=num("prefix_hits"),
        request_success=split("request_success"),
        iterations=num("iterations"),
        prefill_compute_share=num("prefill_compute_share"),
        compute_s=split("compute_s"),
        steps=num("steps"),
    )


def _total(values: list[object]) -> object:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if isinstance(present[0], Mapping):
        merged: dict[str, float] = {}
        for m in present:
            assert isinstance(m, Mapping)
            for k, v in m.items():
                merged[k] = merged.get(k, 0.0) + v
        return merged
    return sum(present)  # type: ignore[arg-type]


_FIELD_NAMES = tuple(f.name for f in fields(EngineMetrics))


def _combine(engines: dict[str, EngineMetrics]) -> dict[str, object]:
    """Sum every field over engines; KV usage is a fraction, so the fullest engine's."""
    if len(engines) == 1:  # the common case: the totals are the one engine's own values
        (only,) = engines.values()
        return {name: getattr(only, name) for name in _FIELD_NAMES}
    out: dict[str, object] = {}
    for f in fields(EngineMetrics):
        values = [getattr(e, f.name) for e in engines.values()]
        if f.name in ("kv_usage", "prefill_compute_share"):
            present = [v for v in values if v is not None]
            out[f.name] = max(present) if present else None
        else:
            out[f.name] = _total(values)
    return out


def _sim_clock(per_engine: dict[str, _Raw]) -> SimClock | None:
    """The simulator's clock: both of its gauges, from the first engine that has them."""
    for raw in per_engine.values():
        engine_s, scale = raw.get("sim_engine_s"), raw.get("sim_scale")
        if isinstance(engine_s, float) and isinstance(scale, float) and scale > 0:
            return SimClock(engine_s, scale)
    return None


def _snapshot(per_engine: dict[str, _Raw]) -> MetricsSnapshot:
    per_engine = dict(sorted(per_engine.items()))
    engines = {key: _engine(raw) for key, raw in per_engine.items()}
    clock = _sim_clock(per_engine)
    return MetricsSnapshot(**_combine(engines), engines=engines, sim_clock=clock)  # type: ignore[arg-type]


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse a Prometheus text page into a `MetricsSnapshot` (raises `MonitorError`)."""
    return _snapshot(_collect(text))


def snapshot_from_samples(
    samples: Iterable[tuple[str, Mapping[str, str], float]],
) -> MetricsSnapshot:
    """The snapshot of one scrape given as (sample name, labels, value) triples, as a
    Prometheus query returns them; samples of families the monitor does not read are skipped.
    Counters stay counters (raw totals), so rates between snapshots work as for a page."""
    per_engine: dict[str, _Raw] = {}
    for name, labels, value in samples:
        if name in _SAMPLES:
            _add(per_engine, name, labels, float(value))
    return _snapshot(per_engine)


def sample_names() -> tuple[str, ...]:
    """Every sample name the monitor reads (counters with and without `_total`, the
    iteration histogram's count, the simulator's clock), for a query that selects them."""
    return tuple(sorted(_SAMPLES))
