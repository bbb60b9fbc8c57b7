"""Convert a recorded `timeline.jsonl` into promtool's `input_series`, to unit-test rules.

Pure: timeline records in, a list of `{series, values}` out, on a fixed grid of `step_s`
seconds (the scrape interval Prometheus would have used). Each sample lands on the grid
point nearest its time (a later record at the same point wins); a point with no record is
`_` (no scrape), a `down` line makes every engine series `stale` and `up` 0, as Prometheus
records a failed scrape; a series a later scrape no longer carries (a core dead behind a
live server) turns `stale` there too. Series are the engine's own `vllm:` names, DCGM's GPU utilisation
for `gpu` lines and `up`, labelled like a scrape of one engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from stallkit.contract import names

#: timeline field -> exported series name (counters with their `_total`)
_FIELDS = {
    "running": names.NUM_REQUESTS_RUNNING,
    "waiting": names.NUM_REQUESTS_WAITING,
    "kv_usage": names.KV_CACHE_USAGE,
    "gen_tokens": names.GENERATION_TOKENS,
    "prompt_tokens": names.PROMPT_TOKENS,
    "preemptions": names.NUM_PREEMPTIONS,
    "prefix_queries": names.PREFIX_CACHE_QUERIES,
    "prefix_hits": names.PREFIX_CACHE_HITS,
    "iterations": names.sample(names.ITERATION_TOKENS, "count"),
}
_Value = TypeVar("_Value", str, float)
_REASONS = {"waiting_capacity": "capacity", "waiting_deferred": "deferred"}
STALE = "stale"
GAP = "_"


def _labels(name: str, labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _num(value: float) -> str:
    return f"{float(value):.10g}"


def _sample_values(record: Mapping[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], str]:
    """(series name, extra labels) -> value, for one `sample` line."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
    for field, name in _FIELDS.items():
        if record.get(field) is not None:
            out[(name, ())] = _num(record[field])
    for field, reason in _REASONS.items():
        if record.get(field) is not None:
            out[(names.NUM_REQUESTS_WAITING_BY_REASON, (("reason", reason),))] = _num(record[field])
    for cls, seconds in (record.get("compute_s") or {}).items():
        out[(names.SCHEDULER_COMPUTE_SECONDS, (("class", cls),))] = _num(seconds)
    return out


def input_series(
    records: Iterable[Mapping[str, Any]],
    step_s: float,
    *,
    job: str = "vllm",
    instance: str = "engine:8000",
    model_name: str = "stallkit-sim",
    gpu_job: str = "dcgm",
) -> tuple[list[dict[str, str]], int]:
    """promtool input series from timeline records, and the number of grid points."""
    engine: dict[tuple[str, tuple[tuple[str, str], ...]], dict[int, str]] = {}
    gpus: dict[str, dict[int, str]] = {}
    up: dict[int, str] = {}
    down_at: set[int] = set()
    sampled_at: set[int] = set()
    last = 0
    for record in records:
        kind = record.get("type")
        if kind not in ("sample", "down", "gpu"):
            continue
        k = round(float(record["t"]) / step_s)
        last = max(last, k)
        if kind == "sample":
            up[k] = "1"
            down_at.discard(k)
            sampled_at.add(k)
            for key, value in _sample_values(record).items():
                engine.setdefault(key, {})[k] = value
        elif kind == "down":
            up[k] = "0"
            down_at.add(k)
        else:
            for gpu, util in record["util"].items():
                gpus.setdefault(str(gpu), {})[k] = _num(util)
    points = last + 1
    base = {"job": job, "instance": instance}
    series = [{"series": _labels("up", base), "values": _row(up, points, GAP)}]
    for (name, extra), values in sorted(engine.items()):
        first = min(values)
        for k in down_at | {k for k in sampled_at if k > first and k not in values}:
            values[k] = STALE
        labels = {**base, "model_name": model_name, "engine": "0", **dict(extra)}
        series.append({"series": _labels(name, labels), "values": _row(values, points, GAP)})
    for gpu, values in sorted(gpus.items()):
        labels = {"job": gpu_job, "instance": instance, "gpu": gpu}
        series.append(
            {"series": _labels(names.DCGM_GPU_UTIL, labels), "values": _row(values, points, GAP)}
        )
    return series, points


def _row(values: Mapping[int, str], points: int, missing: str) -> str:
    return " ".join(values.get(k, missing) for k in range(points))


def openmetrics_text(
    timelines: Mapping[str, Iterable[Mapping[str, Any]]],
    t0_unix: float,
    *,
    job: str = "vllm",
    model_name: str = "stallkit-sim",
    gpu_job: str = "dcgm",
) -> str:
    """Timelines (instance -> its records) as OpenMetrics text with a timestamp on every
    sample (`t0_unix` + `t`): what `promtool tsdb create-blocks-from openmetrics` loads into
    a Prometheus data directory, and what `kit backtest --from-file` replays. Each sample line
    gives the engine's series and `up` 1, a down line `up` 0 alone, a GPU line DCGM's
    utilisation. Families are typed `unknown`, so each sample keeps the name Prometheus
    stores it under."""
    rows: dict[str, list[tuple[str, float, str]]] = {}
    for instance, records in timelines.items():
        base = {"job": job, "instance": instance}
        engine = {**base, "model_name": model_name, "engine": "0"}
        for record in records:
            kind = record.get("type")
            ts = t0_unix + float(record.get("t", 0.0))
            if kind == "sample":
                rows.setdefault("up", []).append((_labels("up", base), ts, "1"))
                for (name, extra), value in _sample_values(record).items():
                    series = _labels(name, {**engine, **dict(extra)})
                    rows.setdefault(name, []).append((series, ts, value))
            elif kind == "down":
                rows.setdefault("up", []).append((_labels("up", base), ts, "0"))
            elif kind == "gpu":
                for gpu, util in sorted(record["util"].items()):
                    labels = {"job": gpu_job, "instance": instance, "gpu": str(gpu)}
                    series = _labels(names.DCGM_GPU_UTIL, labels)
                    rows.setdefault(names.DCGM_GPU_UTIL, []).append((series, ts, _num(util)))
    return timed_openmetrics(rows, str)


def timed_openmetrics(
    rows: Mapping[str, list[tuple[str, float, _Value]]], value_text: Callable[[_Value], str]
) -> str:
    """OpenMetrics text of timed samples: family name -> (series with its labels, Unix
    time, value), each family typed `unknown`, each series' samples together in time order
    (as OpenMetrics wants them), `value_text` writing a value."""
    out = []
    for name, lines in sorted(rows.items()):
        out.append(f"# TYPE {name} unknown")
        out.extend(f"{series} {value_text(value)} {ts:.3f}" for series, ts, value in sorted(lines))
    out.append("# EOF")
    return "\n".join(out) + "\n"
