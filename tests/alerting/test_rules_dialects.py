"""The rules of every metric dialect under promtool: `check rules` for each dialect and for a
mixed fleet's file, and `test rules` on a mixed fleet's series (vLLM, SGLang, llama.cpp and
TGI engines at once, each in its own names): the frozen and thrashing engines fire their
kind, labelled with their dialect; the healthy ones, among them a llama.cpp server in a long
generation whose token counter waits for the request's end, never fire."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from stallkit.contract.names import DIALECT_NAMES
from stallkit.monitor.prometheus.rules import RulesSettings, rules_document, rules_yaml
from tests.alerting.alerting_support import tool

SETTINGS = RulesSettings(
    stall_after_s=10,
    down_after_s=5,
    scrape_interval_s=1,
    evaluation_interval_s=1,
    gpu=False,
    dialects=DIALECT_NAMES,
)
STEPS = 60  # one scrape a second
QUIET_AT = 10  # the stalled engines' progress stops after this many scrapes


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("dialects", [(d,) for d in DIALECT_NAMES] + [DIALECT_NAMES])
def test_promtool_check_rules_passes_for_each_dialect_and_a_mixed_fleet(
    dialects: tuple[str, ...], tmp_path: Path
) -> None:
    settings = RulesSettings(dialects=dialects)
    (tmp_path / "rules.yml").write_text(rules_yaml(settings))
    result = _promtool("check", "rules", "rules.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(g["rules"]) for g in rules_document(settings)["groups"])
    assert f"SUCCESS: {count} rules found" in result.stdout


def test_a_dialect_without_a_signal_has_no_rule_for_the_kinds_that_need_it() -> None:
    doc = rules_document(SETTINGS)
    kinds = {
        group["name"]: sorted(r["labels"]["kind"] for r in group["rules"] if "kind" in r["labels"])
        for group in doc["groups"]
        if "alerts" in group["name"]
    }
    assert kinds["stallkit-alerts"] == sorted(
        ["dead_core", "thrashing", "blocked", "spinning", "frozen"]
    )
    assert kinds["stallkit-alerts-sglang"] == ["dead_core", "frozen", "thrashing"]
    assert kinds["stallkit-alerts-llamacpp"] == ["dead_core", "frozen"]
    assert kinds["stallkit-alerts-tgi"] == ["dead_core", "frozen"]
    assert "# llamacpp: no rule for thrashing: no preemption counter" in rules_yaml(SETTINGS)


def _flat(value: float) -> str:
    return f"{value:g}x{STEPS}"


def _moving(per_step: float) -> str:
    return f"0+{per_step:g}x{STEPS}"


def _stops(per_step: float) -> str:
    """Moves for QUIET_AT scrapes, then holds."""
    return f"0+{per_step:g}x{QUIET_AT} {per_step * QUIET_AT:g}x{STEPS - QUIET_AT}"


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


def _engine(instance: str, job: str, model: bool, families: dict[str, str]) -> list[dict[str, str]]:
    labels = {"instance": instance, "job": job} | ({"model_name": "m"} if model else {})
    out = [_series("up", {"instance": instance, "job": job}, _flat(1))]
    for name, values in families.items():
        name, _, extra = name.partition("|")
        more = dict([extra.split("=")]) if extra else {}
        out.append(_series(name, labels | more, values))
    return out


FLEET = [
    *_engine("v:1", "vllm", True, {  # healthy
        "vllm:num_requests_running": _flat(2), "vllm:num_requests_waiting": _flat(0),
        "vllm:generation_tokens_total": _moving(10), "vllm:prompt_tokens_total": _moving(5),
        "vllm:num_preemptions_total": _flat(0), "vllm:prefix_cache_queries_total": _moving(10),
    }),
    *_engine("s:1", "sglang", True, {  # frozen: its live decode tokens stop
        "sglang:num_running_reqs": _flat(2), "sglang:num_queue_reqs": _flat(1),
        "sglang:generation_tokens_total": _flat(0), "sglang:prompt_tokens_total": _flat(0),
        "sglang:num_retracted_requests_total": _flat(0),
        "sglang:realtime_tokens_total|mode=decode": _stops(10),
        "sglang:realtime_tokens_total|mode=prefill_cache": _moving(3),  # not progress
    }),
    *_engine("s:2", "sglang", True, {  # thrashing: retracted and re-prefilled, no token
        "sglang:num_running_reqs": _flat(2), "sglang:num_queue_reqs": _flat(2),
        "sglang:generation_tokens_total": _flat(0), "sglang:prompt_tokens_total": _moving(50),
        "sglang:num_retracted_requests_total": _moving(1),
        "sglang:realtime_tokens_total|mode=decode": _stops(10),
    }),
    *_engine("l:1", "llama", False, {  # healthy: one long generation, decode calls move
        "llamacpp:requests_processing": _flat(1), "llamacpp:requests_deferred": _flat(0),
        "llamacpp:tokens_predicted_total": _flat(0), "llamacpp:prompt_tokens_total": _flat(0),
        "llamacpp:n_decode_total": _moving(3),
    }),
    *_engine("t:1", "tgi", False, {  # frozen: no forward pass succeeds any more
        "tgi_queue_size": _flat(1), "tgi_batch_current_size": _flat(2),
        "tgi_batch_inference_success|method=decode": _stops(4),
        "tgi_request_generated_tokens_sum": _flat(0),
    }),
]  # fmt: skip


def _alert(instance: str, job: str, model: bool, kind: str, dialect: str) -> dict[str, Any]:
    groups = rules_document(SETTINGS)["groups"]
    group = next(g for g in groups if g["name"] == f"stallkit-alerts-{dialect}")
    rule = next(r for r in group["rules"] if r["labels"].get("kind") == kind)
    annotations = dict(rule["annotations"])
    annotations["summary"] = annotations["summary"].replace("{{ $labels.instance }}", instance)
    labels = {"instance": instance, "job": job, "severity": "critical", "kind": kind}
    labels |= {"dialect": dialect} | ({"model_name": "m"} if model else {})
    return {"exp_labels": labels, "exp_annotations": annotations}


def test_a_mixed_fleets_stalled_engines_fire_their_kind_and_no_healthy_one_does(
    tmp_path: Path,
) -> None:
    firing = [
        _alert("s:1", "sglang", True, "frozen", "sglang"),
        _alert("s:2", "sglang", True, "thrashing", "sglang"),
        _alert("t:1", "tgi", False, "frozen", "tgi"),
    ]
    cases = [
        {"eval_time": "8s", "alertname": "EngineStalled", "exp_alerts": []},
        {"eval_time": "45s", "alertname": "EngineStalled", "exp_alerts": firing},
        {"eval_time": "45s", "alertname": "EngineMetricsDown", "exp_alerts": []},
    ]
    doc = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1s",
        "tests": [{"interval": "1s", "input_series": FLEET, "alert_rule_test": cases}],
    }
    (tmp_path / "rules.yml").write_text(rules_yaml(SETTINGS))
    (tmp_path / "tests.yml").write_text(json.dumps(doc, indent=1))
    result = _promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
