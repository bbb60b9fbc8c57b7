"""Turn an engine's `/metrics` page into a typed snapshot of the signals the monitor reads.

Pure: text in, `MetricsSnapshot` out. The page is read in a metric dialect
(`stallkit.monitor.signals.dialects`: vLLM's, SGLang's, llama.cpp's, TGI's), told apart from
the page itself unless one is given. Only the sample lines of the families read are handed
to prometheus_client's text parser; a real page is mostly histogram buckets and process
metrics, and parsing all of it costs ten times more than the rest of a tick. Matching is on
sample names, which keep their `_total` suffix whatever the parser does to family names,
and both the `_total` and the bare name are accepted. Values are summed over the dialect's
data-parallel label (vLLM's `engine`) and each engine's view is kept; a name the engine does
not export stays `None`, never zero (a dialect whose exporter declares a family only once
used reads it as 0 on a page it recognises). The simulator's own clock (its engine time and
time scale, which no real engine exports) is kept apart as `sim_clock`: it is one clock per
server, not summed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from prometheus_client.parser import text_string_to_metric_families

from stallkit.monitor.errors import MonitorError
from stallkit.monitor.signals.dialects import (
    DIALECTS,
    VLLM,
    Dialect,
    detect_dialect,
    dialect_of_samples,
)


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
    # a live count of forward work (llama.cpp's decode calls, TGI's forward passes, SGLang's
    # decode tokens), for engines whose token counters count a request only when it finishes
    forward_progress: float | None = None

    @property
    def has_engine_series(self) -> bool:
        """Whether the page carries the engine signals a stall is judged on."""
        return (self.gen_tokens is not None or self.forward_progress is not None) and (
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


def _select_lines(text: str, dialect: Dialect) -> str:
    """Keep only the sample lines of the families read (no HELP/TYPE: parsed as untyped)."""
    keep = []
    prefixes, samples = dialect.sample_prefixes, dialect.samples
    for line in text.splitlines():
        if line.startswith(prefixes):
            cut = len(line)
            for sep in ("{", " "):
                pos = line.find(sep)
                if 0 <= pos < cut:
                    cut = pos
            if line[:cut] in samples:
                keep.append(line)
    keep.append("")
    return "\n".join(keep)


def _add(
    per_engine: dict[str, _Raw],
    dialect: Dialect,
    name: str,
    labels: Mapping[str, str],
    value: float,
) -> None:
    """Add one sample of a read family to its engine's raw fields."""
    series = dialect.samples[name]
    if series.only is not None and labels.get(series.only[0]) != series.only[1]:
        return
    raw = per_engine.setdefault(labels.get(dialect.engine_label, "0"), {})
    if series.split:
        sub = raw.setdefault(series.field, {})
        assert isinstance(sub, dict)
        key = labels.get(series.split, "")
        sub[key] = sub.get(key, 0.0) + value
    else:
        old = raw.get(series.field, 0.0)
        assert isinstance(old, float)
        raw[series.field] = old + value


def _collect(text: str, dialect: Dialect) -> dict[str, _Raw]:
    """Per engine label: field -> value, or field -> {label value: value}."""
    per_engine: dict[str, _Raw] = {}
    try:
        for family in text_string_to_metric_families(_select_lines(text, dialect)):
            for sample in family.samples:
                _add(per_engine, dialect, sample.name, sample.labels, sample.value)
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
        forward_progress=num("forward_progress"),
    )


def _zero_filled(per_engine: dict[str, _Raw], dialect: Dialect) -> dict[str, _Raw]:
    """A recognised page of a dialect whose families appear once used: the missing request
    gauges and counters read 0 (a missing KV usage stays unknown: no engine idles at a full
    cache, but none is known to be empty either)."""
    scalars = {s.field for s in dialect.series if not s.split and not s.field.startswith("kv_")}
    out: dict[str, _Raw] = {}
    for key, raw in (per_engine or {"0": {}}).items():
        filled: _Raw = {name: 0.0 for name in sorted(scalars)}
        out[key] = filled | raw
    return out


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


def parse_metrics(text: str, dialect: Dialect | None = None) -> MetricsSnapshot:
    """Parse a Prometheus text page into a `MetricsSnapshot` (raises `MonitorError`).

    `dialect`: the page's metric dialect; None: told apart from the page (`detect_dialect`),
    vLLM's for a page that carries no engine family."""
    if dialect is None:
        dialect = detect_dialect(text) or VLLM
    per_engine = _collect(text, dialect)
    if dialect.absent_is_zero and dialect.recognises(text):
        per_engine = _zero_filled(per_engine, dialect)
    return _snapshot(per_engine)


def snapshot_from_samples(
    samples: Iterable[tuple[str, Mapping[str, str], float]],
    dialect: Dialect | None = None,
) -> MetricsSnapshot:
    """The snapshot of one scrape given as (sample name, labels, value) triples, as a
    Prometheus query returns them; samples of families the dialect does not read are
    skipped. `dialect` None: the one the sample names belong to. Counters stay counters
    (raw totals), so rates between snapshots work as for a page."""
    samples = list(samples)
    if dialect is None:
        dialect = dialect_of_samples(name for name, _labels, _value in samples) or VLLM
    per_engine: dict[str, _Raw] = {}
    owned = False
    for name, labels, value in samples:
        if name in dialect.samples:
            _add(per_engine, dialect, name, labels, float(value))
        owned = owned or dialect.owns(name)
    if dialect.absent_is_zero and owned:
        per_engine = _zero_filled(per_engine, dialect)
    return _snapshot(per_engine)


def sample_names(dialect: Dialect | None = None) -> tuple[str, ...]:
    """Every sample name the monitor reads in `dialect` (None: in every dialect), counters
    with and without `_total`, histogram counts, the simulator's clock, for a query that
    selects them."""
    return tuple(sorted({n for d in ([dialect] if dialect else DIALECTS) for n in d.samples}))
