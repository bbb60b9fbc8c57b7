"""The stall rule as Prometheus recording and alerting rules over the engine's own series.

Pure: settings in, a rules document (nested dicts) and its YAML text out. The recording
group turns vLLM's `vllm:` series (and DCGM's `DCGM_FI_DEV_GPU_UTIL`) into the detector's
inputs per engine (`job`, `instance`, `model_name`, summed over data-parallel engines); the
alerting group holds the stall (`for:` = stall_after, kind spinning/frozen in the
annotations), engine down (`up == 0`, which is not a stall) and one alert on stallkit's own
exporter for watchdog use. The generation rate is `irate` over the last two scrapes, so the
condition turns true one scrape after the detector's onset (the last sample with a new token
count): the alert fires at onset + stall_after + one scrape, in the evaluation that follows.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contract import names

#: Labels that name one engine in the recorded series (data-parallel `engine` is summed).
ENGINE_LABELS = "job, instance, model_name"
#: Counters that keep moving while a scheduler steps without output (any of them is enough).
ACTIVITY_COUNTERS = (
    names.PREFIX_CACHE_QUERIES,
    names.SCHEDULER_STEPS,
    names.sample(names.ITERATION_TOKENS, "count"),
    names.SCHEDULER_COMPUTE_SECONDS,
)
#: The series the recording group writes, with what each one means.
RECORDED = {
    "stallkit:generation_tokens:irate": "generated tokens per second over the last two scrapes",
    "stallkit:generation_tokens:rate": "generated tokens per second over the rate window",
    "stallkit:requests_running": "running requests",
    "stallkit:requests_waiting": "waiting requests",
    "stallkit:requests_pending": "running plus waiting requests",
    "stallkit:kv_cache_usage:max": "KV cache usage (0..1), the fullest engine",
    "stallkit:scheduler_activity:rate": "scheduler counters per second (moving while it spins)",
    "stallkit:gpu_utilization:max": "the busiest watched GPU's utilisation (%)",
    "stallkit:stall_condition": "the stall rule holds now (value: pending requests)",
}

#: label matchers as PromQL writes them inside `{...}`: name, operator, a double-quoted value
#: (with escapes), comma-separated; empty is none
_VALUE = r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`"""
_MATCHER = rf"\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*(?:{_VALUE})\s*"
_MATCHERS = re.compile(rf"^(?:{_MATCHER}(?:,{_MATCHER})*,?\s*)?$")


class RulesSettings(BaseModel):
    """What the generated rules watch and their thresholds (engine = wall seconds here)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stall_after_s: float = Field(
        60.0, gt=0, description="Seconds of stall before the stall alert fires (its `for:`)."
    )
    down_after_s: float = Field(
        60.0,
        gt=0,
        description="Seconds /metrics may fail before the engine-down alert fires (its `for:`).",
    )
    idle_gpu_perc: float = Field(
        5.0, ge=0, le=100, description="A GPU at or under this utilisation (%) counts as idle."
    )
    scrape_interval_s: float = Field(
        15.0, gt=0, description="Prometheus's scrape interval for the engine (sets the windows)."
    )
    evaluation_interval_s: float = Field(
        15.0, gt=0, description="How often the rule groups are evaluated."
    )
    engine_selector: str = Field(
        "", description='PromQL label matchers picking the engines, e.g. job="vllm".'
    )
    gpu: bool = Field(True, description="Whether DCGM GPU utilisation is part of the rule.")
    gpu_selector: str = Field(
        "", description=f"Label matchers picking the engine's GPUs in {names.DCGM_GPU_UTIL}."
    )
    gpu_match_labels: str = Field(
        "",
        pattern=r"^\s*([A-Za-z_][A-Za-z0-9_]*\s*(,\s*[A-Za-z_][A-Za-z0-9_]*\s*)*)?$",
        description="Labels an engine's series share with its GPUs' (e.g. instance, when DCGM "
        "is scraped from the engine's address); empty: every selected GPU counts.",
    )

    @field_validator("engine_selector", "gpu_selector")
    @classmethod
    def _promql_matchers(cls, value: str) -> str:
        # refused here, not by promtool or Prometheus after the rules were shipped
        if not _MATCHERS.match(value.strip().strip("{}")):
            raise ValueError(
                f'{value!r} is not a list of PromQL label matchers (name="value", '
                'operators = != =~ !~, comma-separated, e.g. job="vllm", instance=~"gpu-.*")'
            )
        return value


def _dur(seconds: float) -> str:
    """A Prometheus duration: whole milliseconds, in the largest exact unit."""
    ms = max(1, round(seconds * 1000))
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _sel(matchers: str, extra: str = "") -> str:
    parts = [p for p in (matchers.strip().strip("{}"), extra) if p]
    return "{" + ", ".join(parts) + "}" if parts else ""


def _recording(s: RulesSettings) -> list[dict[str, str]]:
    sel = _sel(s.engine_selector)
    by = f"sum by ({ENGINE_LABELS})"
    short = _dur(max(2.5 * s.scrape_interval_s, s.evaluation_interval_s))
    window = _dur(max(4 * s.scrape_interval_s, 60.0))
    # one branch per counter, told apart by a label, so `or` keeps them all for the sum
    branches = " or ".join(
        f'label_replace({by} (irate({name}{sel}[{short}])), "counter", "{name.removeprefix(names.VLLM_PREFIX)}", "", "")'
        for name in ACTIVITY_COUNTERS
    )
    kv = f"{names.KV_CACHE_USAGE}{sel} or {names.GPU_CACHE_USAGE_OLD}{sel}"
    gen = names.GENERATION_TOKENS
    rules = [
        ("stallkit:generation_tokens:irate", f"{by} (irate({gen}{sel}[{short}]))"),
        ("stallkit:generation_tokens:rate", f"{by} (rate({gen}{sel}[{window}]))"),
        ("stallkit:requests_running", f"{by} ({names.NUM_REQUESTS_RUNNING}{sel})"),
        ("stallkit:requests_waiting", f"{by} ({names.NUM_REQUESTS_WAITING}{sel})"),
        ("stallkit:requests_pending", "stallkit:requests_running + stallkit:requests_waiting"),
        ("stallkit:kv_cache_usage:max", f"max by ({ENGINE_LABELS}) ({kv})"),
        ("stallkit:scheduler_activity:rate", f"sum without (counter) ({branches})"),
    ]  # fmt: skip
    condition = (
        "stallkit:requests_pending > 0 and on ("
        + ENGINE_LABELS
        + ") stallkit:generation_tokens:irate == 0"
    )
    if s.gpu:
        gpu = _sel(s.gpu_selector)
        match = ", ".join(x.strip() for x in s.gpu_match_labels.split(",") if x.strip())
        rules.append(
            ("stallkit:gpu_utilization:max", f"max by ({match}) ({names.DCGM_GPU_UTIL}{gpu})")
        )
        idle = f"stallkit:gpu_utilization:max <= {s.idle_gpu_perc:g}"
        condition = f"({condition}) and on ({match}) {idle}"
    rules.append(("stallkit:stall_condition", condition))
    return [{"record": name, "expr": expr} for name, expr in rules]


def inline(expr: str, recording: list[dict[str, str]]) -> str:
    """`expr` with every recorded series replaced by its own expression, recursively.

    Prometheus evaluates rule groups independently, in no set order: an alert reading a
    series recorded by another group at the same instant may see the previous evaluation's
    value, one interval late. Alerts therefore carry the whole rule themselves.
    """
    defs = {r["record"]: r["expr"] for r in recording}
    pattern = re.compile(r"(?<![\w:])(" + "|".join(re.escape(n) for n in defs) + r")(?![\w:])")
    while pattern.search(expr):
        expr = pattern.sub(lambda m: f"({defs[m.group(1)]})", expr)
    return expr


def _alerts(s: RulesSettings) -> list[dict[str, Any]]:
    gpu_note = (
        f"every watched GPU at or under {s.idle_gpu_perc:g} % ({names.DCGM_GPU_UTIL})"
        if s.gpu
        else "no GPU series: judged on engine metrics alone"
    )
    stall_expr = (
        "(stallkit:scheduler_activity:rate or stallkit:stall_condition * 0)"
        f" and on ({ENGINE_LABELS}) stallkit:stall_condition"
    )
    kind = "{{ if gt $value 0.0 }}spinning{{ else }}frozen{{ end }}"
    engine = "{{ $labels.instance }}"
    stall = {
        "alert": "EngineStalled",
        "expr": inline(stall_expr, _recording(s)),
        "for": _dur(s.stall_after_s),
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": f"{engine}: no token generated with requests pending ({kind})",
            "kind": kind,
            "gpu": gpu_note,
            "description": (
                "Generated-token rate 0 while requests are running or waiting, for "
                f"{_dur(s.stall_after_s)}; {gpu_note}. spinning: the scheduler's counters "
                "still move (it steps without output); frozen: nothing moves. /health may "
                "still answer 200."
            ),
        },
    }
    down = {
        "alert": "EngineMetricsDown",
        "expr": f"up{_sel(s.engine_selector)} == 0",
        "for": _dur(s.down_after_s),
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": f"{engine}: /metrics does not answer (engine down; not a stall)",
        },
    }
    watchdog = {
        "alert": "StallkitDetectedStall",
        "expr": f"max by (engine, arm) ({names.STALL_ACTIVE}) > 0",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "stallkit's monitor sees a stall on {{ $labels.engine }}",
            "description": "From the exporter of `kit monitor --metrics-port` (the detector itself).",
        },
    }
    return [stall, down, watchdog]


def rules_document(settings: RulesSettings) -> dict[str, Any]:
    """The rules file as a mapping: a recording group and an alerting group."""
    interval = _dur(settings.evaluation_interval_s)
    return {
        "groups": [
            {"name": "stallkit-recording", "interval": interval, "rules": _recording(settings)},
            {"name": "stallkit-alerts", "interval": interval, "rules": _alerts(settings)},
        ]
    }


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML of dicts, lists and scalars; strings double-quoted (JSON escapes)."""
    pad = " " * indent
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                lines.append(f"{pad}{key}:\n{to_yaml(item, indent + 2)}")
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}")
        return "\n".join(lines)
    if isinstance(value, list):
        lines = []
        for item in value:
            body = to_yaml(item, indent + 2) if isinstance(item, dict | list) else _scalar(item)
            lines.append(f"{pad}- {body.lstrip()}" if body else f"{pad}- {{}}")
        return "\n".join(lines)
    return pad + _scalar(value)


def _scalar(value: Any) -> str:
    if isinstance(value, dict | list):
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(value)


def rules_yaml(settings: RulesSettings) -> str:
    """The rules file's text."""
    header = "# stallkit: the stall rule as Prometheus rules (generated by `kit rules`)\n"
    return header + to_yaml(rules_document(settings)) + "\n"
