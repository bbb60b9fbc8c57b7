"""The stall rule as Prometheus recording and alerting rules over the engine's own series.

Pure: settings in, a rules document (nested dicts) and its YAML text out. The recording
group turns vLLM's `vllm:` series (and DCGM's `DCGM_FI_DEV_GPU_UTIL`) into the detector's
inputs per engine (`job`, `instance`, `model_name`, summed over data-parallel engines): the
quiet condition (work pending, no token, no prompt token counted without a preemption) and
the signs that tell the kinds apart. The alerting group holds one `EngineStalled` rule per
stall kind (label `kind`; `for:` = stall_after), checked in the detector's order, each
excluding the kinds before it: dead_core (the server answers, the engine's series are
gone, after it had work), thrashing (preemptions), blocked (the scheduler's counters move
with nothing running and requests waiting), busy_hang (GPUs busy, the scheduler still),
spinning (the scheduler's counters move), frozen (nothing moves, whatever the gauges read: a
stopped core keeps those of its last step); then engine down (`up == 0`, which is not a
stall) and one alert on stallkit's own exporter for watchdog use. Rates are `irate` over the
last two scrapes, so a condition turns true one scrape after the detector's onset (the last
sample with progress): an alert fires at onset + stall_after + one scrape, in the
evaluation that follows. Without GPU series (`gpu = false`) there is no busy_hang rule and
frozen is judged on the engine's series alone. The detector also takes the engine's CPU as a
sign that the scheduler steps, where stallkit reads it (engines it launched); Prometheus has no
such series here, so an engine without a step counter that sits blocked while burning CPU is
`blocked` in the detector and `frozen` in these rules.

Each metric dialect read (`dialects`: vLLM's by default; SGLang's, llama.cpp's, TGI's) has
its own pair of groups over its engine's names (`stallkit.monitor.prometheus.dialect_series`),
so one file watches a mixed fleet: an engine's series are in one dialect, so only its
dialect's rules see it. Progress there is the token counter or the engine's live forward
counter; a kind whose signal the engine does not export (thrashing without a preemption
counter, blocked and spinning without a step counter) has no rule for that dialect, and the
file's header says which and why.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from stallkit.contract import names
from stallkit.contract.timeline import STALL_KIND_MEANING, StallKind
from stallkit.monitor.detect.detector import DEAD_CORE_MEMORY_S
from stallkit.monitor.prometheus.dialect_series import PromSignals, prom_signals
from stallkit.monitor.signals.dialects import dialect_named

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
    "stallkit:prompt_tokens:irate": "prompt tokens counted per second over the last two scrapes",
    "stallkit:preemptions:increase": "preemptions over the last few scrapes",
    "stallkit:requests_running": "running requests",
    "stallkit:requests_waiting": "waiting requests",
    "stallkit:requests_pending": "running plus waiting requests",
    "stallkit:kv_cache_usage:max": "KV cache usage (0..1), the fullest engine",
    "stallkit:scheduler_activity:rate": "scheduler counters per second (moving while it spins)",
    "stallkit:gpu_utilization:max": "the busiest watched GPU's utilisation (%)",
    "stallkit:stall_condition": "quiet with work pending now (value: pending requests)",
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
        "",
        description='PromQL label matchers picking the engines, e.g. job="vllm" (the dead '
        "core's alert applies them to `up` too: use labels it has, such as job and instance).",
    )
    gpu: bool = Field(True, description="Whether DCGM GPU utilisation is part of the rule.")
    gpu_window_s: float = Field(
        1.0,
        ge=0,
        description="DCGM averages GPU utilisation over this trailing window: readings within "
        "it after the last token may still show earlier work and are no evidence of a hang.",
    )
    gpu_selector: str = Field(
        "", description=f"Label matchers picking the engine's GPUs in {names.DCGM_GPU_UTIL}."
    )
    dialects: tuple[names.DialectName, ...] = Field(
        ("vllm",),
        min_length=1,
        description="The metric dialects the engines speak (vllm, sglang, llamacpp, tgi): one "
        "pair of rule groups each.",
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


def _on(labels: str = ENGINE_LABELS) -> str:
    return f"and on ({labels})"


def _summed(fn: str, metric_names: tuple[str, ...], window: str, sig: PromSignals, sel: str) -> str:
    """`fn` of each counter summed per engine; several counters summed together (one branch
    each, told apart by a label, so `or` keeps them all for the sum)."""
    by = f"sum by ({ENGINE_LABELS})"
    if len(metric_names) == 1:
        return f"{by} ({fn}({sig.sel(metric_names[0], sel)}[{window}]))"
    branches = " or ".join(
        f'label_replace({by} ({fn}({sig.sel(name, sel)}[{window}])), "counter", "{name.removeprefix(sig.prefix)}", "", "")'
        for name in metric_names
    )
    return f"sum without (counter) ({branches})"


def _recording(s: RulesSettings, dialect: str = "vllm") -> list[dict[str, str]]:
    sig = prom_signals(dialect_named(dialect))
    sel = s.engine_selector
    by = f"sum by ({ENGINE_LABELS})"
    short = _dur(max(2.5 * s.scrape_interval_s, s.evaluation_interval_s))
    window = _dur(max(4 * s.scrape_interval_s, 60.0))
    rules = [
        ("stallkit:generation_tokens:irate", _summed("irate", sig.tokens, short, sig, sel)),
        ("stallkit:generation_tokens:rate", _summed("rate", sig.tokens, window, sig, sel)),
    ]
    if sig.prompt:
        rules.append(
            ("stallkit:prompt_tokens:irate", _summed("irate", sig.prompt, short, sig, sel))
        )
    if sig.preemptions:
        increase = _summed("increase", sig.preemptions, short, sig, sel)
        rules.append(("stallkit:preemptions:increase", increase))
    rules += [
        ("stallkit:requests_running", f"{by} ({sig.sel(sig.running[0], sel)})"),
        ("stallkit:requests_waiting", f"{by} ({sig.sel(sig.waiting[0], sel)})"),
        ("stallkit:requests_pending", "stallkit:requests_running + stallkit:requests_waiting"),
    ]
    if sig.kv:
        kv = " or ".join(sig.sel(name, sel) for name in sig.kv)
        rules.append(("stallkit:kv_cache_usage:max", f"max by ({ENGINE_LABELS}) ({kv})"))
    if sig.activity:
        activity = _summed("irate", sig.activity, short, sig, sel)
        rules.append(("stallkit:scheduler_activity:rate", activity))
    if s.gpu:
        gpu = f"{names.DCGM_GPU_UTIL}{_sel(s.gpu_selector)}"
        rules.append(("stallkit:gpu_utilization:max", f"max by ({_gpu_match(s)}) ({gpu})"))
    # quiet: work pending, no token, and no prompt token counted unless work was thrown away
    quiet = f"stallkit:requests_pending > 0 {_on()} stallkit:generation_tokens:irate == 0"
    if sig.prompt and sig.preemptions:
        quiet += (
            f" {_on()} (stallkit:prompt_tokens:irate == 0 or stallkit:preemptions:increase > 0)"
        )
    elif sig.prompt:
        quiet += f" {_on()} stallkit:prompt_tokens:irate == 0"
    rules.append(("stallkit:stall_condition", quiet))
    return [{"record": name, "expr": expr} for name, expr in rules]


def _gpu_match(s: RulesSettings) -> str:
    return ", ".join(x.strip() for x in s.gpu_match_labels.split(",") if x.strip())


def kind_conditions(s: RulesSettings, dialect: str = "vllm") -> dict[StallKind, str]:
    """Each kind's condition over the recorded series, in the detector's order, each
    excluding the kinds before it (so one engine matches one kind at a time); a kind the
    dialect's engine cannot show has none."""
    sig = prom_signals(dialect_named(dialect))
    q = "stallkit:stall_condition"
    moving = "stallkit:scheduler_activity:rate > 0"
    still = f" {_on()} stallkit:scheduler_activity:rate == 0" if sig.activity else ""
    sel = _sel(s.engine_selector)
    memory = _dur(DEAD_CORE_MEMORY_S)
    # each side compared on its own: `or` of two unnamed vectors keeps only the left one
    had_work = " or ".join(
        f"max by (job, instance) (max_over_time({name}{sel}[{memory}])) > 0"
        for name in (sig.running[0], sig.waiting[0])
    )
    out: dict[StallKind, str] = {
        "dead_core": f"(up{sel} == 1) unless on (job, instance) {sig.running[0]}{sel}"
        f" {_on('job, instance')} ({had_work})",
    }
    prior: list[str] = []  # the conditions of the kinds before, dead_core aside
    if sig.preemptions:
        out["thrashing"] = f"{q} {_on()} stallkit:preemptions:increase > 0"
        prior.append(out["thrashing"])
    if sig.activity:
        # blocked needs a live scheduler: a stopped core's last gauges may read 0 running, N
        # waiting too, and it is frozen
        waits = f"stallkit:requests_running == 0 {_on()} stallkit:requests_waiting > 0"
        blocked = f"({q} {_on()} {waits} {_on()} {moving})"
        out["blocked"] = _unless(blocked, prior)
        prior.append(out["blocked"])
    frozen = f"{q}{still}"
    if s.gpu:
        busy = f"stallkit:gpu_utilization:max > {s.idle_gpu_perc:g}"
        hang = f"{q}{still} {_on(_gpu_match(s))} {busy}"
        out["busy_hang"] = _unless(f"({hang})", prior)
        # a busy reading within the averaging window after the last token still shows that
        # work: frozen then, not a hang; without GPU series, frozen too
        since = _dur(s.gpu_window_s + s.scrape_interval_s)
        recent = " or ".join(
            f"sum by ({ENGINE_LABELS}) (increase({sig.sel(name, s.engine_selector)}[{since}])) > 0"
            for name in sig.tokens
        )
        frozen = f"({frozen}) unless on ({ENGINE_LABELS}) (({hang}) unless on ({ENGINE_LABELS}) ({recent}))"
    if sig.activity:
        out["spinning"] = _unless(f"({q} {_on()} {moving})", prior)
    out["frozen"] = _unless(f"({frozen})", prior)
    return out


def _unless(expr: str, prior: list[str]) -> str:
    """`expr` unless one of the kinds before it holds for the engine."""
    if not prior:
        return expr
    before = " or ".join(f"({p})" for p in prior)
    if len(prior) == 1:
        return f"{expr} unless on ({ENGINE_LABELS}) {before}"
    return f"{expr} unless on ({ENGINE_LABELS}) ({before})"


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


def _alerts(s: RulesSettings, dialect: str = "vllm") -> list[dict[str, Any]]:
    gpu_note = (
        f"GPU busy above {s.idle_gpu_perc:g} % ({names.DCGM_GPU_UTIL}) tells a busy hang "
        "from a frozen engine"
        if s.gpu
        else "no GPU series: judged on engine metrics alone"
    )
    engine = "{{ $labels.instance }}"
    recording = _recording(s, dialect)
    stalls = [
        {
            "alert": "EngineStalled",
            "expr": inline(expr, recording),
            "for": _dur(s.stall_after_s),
            "labels": {"severity": "critical", "kind": kind},
            "annotations": {
                "summary": f"{engine}: stalled ({kind}): {STALL_KIND_MEANING[kind]}",
                "gpu": gpu_note,
                "description": (
                    f"Stall kind {kind} for {_dur(s.stall_after_s)}: {STALL_KIND_MEANING[kind]}. A "
                    "stall is work pending (running or waiting requests) with no token "
                    "generated and no prefill moving forward. /health may still answer 200."
                ),
            },
        }
        for kind, expr in kind_conditions(s, dialect).items()
    ]
    if dialect != s.dialects[0]:  # the engine-down and watchdog alerts are written once
        return stalls
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
        "expr": f"max by (engine, arm, kind) ({names.STALL_ACTIVE}) > 0",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "stallkit's monitor sees a {{ $labels.kind }} stall on {{ $labels.engine }}",
            "description": "From the exporter of `kit monitor --metrics-port` (the detector itself).",
        },
    }
    return [*stalls, down, watchdog]


def rules_document(settings: RulesSettings) -> dict[str, Any]:
    """The rules file as a mapping: a recording group and an alerting group per dialect
    (vLLM's named `stallkit-recording` and `stallkit-alerts`, the others suffixed)."""
    interval = _dur(settings.evaluation_interval_s)
    groups = []
    for dialect in settings.dialects:
        suffix, labels = dialect_named(dialect).group_suffix, dialect_named(dialect).rule_labels
        own = _recording(settings, dialect)
        if len(settings.dialects) > 1:  # a record read by a record: this dialect's own
            own = [{**rule, "expr": inline(rule["expr"], own)} for rule in own]
        recording: list[dict[str, Any]] = [
            {**rule, "labels": labels} if labels else rule for rule in own
        ]
        alerts = _alerts(settings, dialect)
        for alert in alerts if labels else []:
            if alert["alert"] == "EngineStalled":
                alert["labels"] = {**alert["labels"], **labels}
        groups += [
            {"name": f"stallkit-recording{suffix}", "interval": interval, "rules": recording},
            {"name": f"stallkit-alerts{suffix}", "interval": interval, "rules": alerts},
        ]
    return {"groups": groups}


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
    for name in settings.dialects:
        missing = dialect_named(name).unavailable()
        if missing:
            why = "; ".join(f"{kind}: {reason}" for kind, reason in missing.items())
            header += f"# {name}: no rule for {why}\n"
    return header + to_yaml(rules_document(settings)) + "\n"
