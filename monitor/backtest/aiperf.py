"""AIPerf's server-metrics export as a backtest history (`kit backtest --from-file`). Pure.

`aiperf profile` scrapes the server's `/metrics` while it runs and, with
`--server-metrics-formats ... jsonl`, writes each scrape to `server_metrics_export.jsonl`:
one JSON object per line with the page's URL (`endpoint_url`), the scrape's time
(`timestamp_ns`) and its `metrics`, each name to a list of samples (`{"value": N}` with
optional `labels`; a histogram as `{"histogram": {le: count}, "sum": N, "count": N}`).
Here each line becomes OpenMetrics samples at its own time, labelled `instance` (the page's
host:port) and `job` "aiperf", with `up` 1: the same text a recorded timeline converts to,
so the replay is the one `kit backtest` runs over any OpenMetrics file. AIPerf leaves out a
scrape identical to the one before it (its deduplication): a quiet stretch is then the gap
between two scrapes, which the detector reads as one interval without progress.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from stallkit.monitor.errors import MonitorError
from stallkit.monitor.prometheus.series import timed_openmetrics

__all__ = ["JOB", "aiperf_openmetrics", "is_aiperf_record"]

#: the job label of an AIPerf history's series
JOB = "aiperf"


def is_aiperf_record(record: object) -> bool:
    """Whether a JSON line is one of AIPerf's server-metrics scrapes."""
    return isinstance(record, dict) and {"endpoint_url", "timestamp_ns", "metrics"} <= set(record)


def _series(name: str, labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _samples(name: str, entry: Mapping[str, Any]) -> Iterable[tuple[str, dict[str, str], float]]:
    """(sample name, its own labels, value) of one entry of a metric's list."""
    labels = {str(k): str(v) for k, v in (entry.get("labels") or {}).items()}
    if "value" in entry:
        yield name, labels, float(entry["value"])
    elif "histogram" in entry:
        for le, count in entry["histogram"].items():
            yield f"{name}_bucket", {**labels, "le": str(le)}, float(count)
        for part in ("sum", "count"):
            if part in entry:
                yield f"{name}_{part}", labels, float(entry[part])


def aiperf_openmetrics(records: Iterable[Mapping[str, Any]]) -> str:
    """AIPerf's scrapes as OpenMetrics text with a timestamp on every sample (see above);
    `MonitorError` for a line that is not one of its scrapes."""
    rows: dict[str, list[tuple[str, float, float]]] = {}
    for n, record in enumerate(records, start=1):
        if not is_aiperf_record(record):
            raise MonitorError(
                f"line {n} is not an AIPerf server-metrics scrape",
                hint="give AIPerf's server_metrics_export.jsonl, a run's timeline.jsonl, "
                "or OpenMetrics text",
            )
        instance = urlsplit(str(record["endpoint_url"])).netloc or str(record["endpoint_url"])
        base = {"job": JOB, "instance": instance}
        ts = int(record["timestamp_ns"]) / 1e9
        rows.setdefault("up", []).append((_series("up", base), ts, 1.0))
        for name, entries in (record.get("metrics") or {}).items():
            for entry in entries if isinstance(entries, list) else []:
                for sample, labels, value in _samples(str(name), entry):
                    series = _series(sample, {**labels, **base})
                    rows.setdefault(sample, []).append((series, ts, value))
    return timed_openmetrics(rows, lambda value: f"{value:.10g}")
