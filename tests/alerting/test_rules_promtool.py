"""The generated rules under promtool: `check rules` on every variant, and `test rules` with
input series converted from simulator timelines (one per stall kind: that kind's alert, and
no other, fires one or two evaluations after the detector's verdict; healthy: never;
/metrics down: the engine-down alert, never a stall)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from stallkit.contract.timeline import STALL_KINDS
from stallkit.monitor.prometheus.rules import RulesSettings, rules_document, rules_yaml
from stallkit.monitor.prometheus.series import input_series
from tests.alerting.alerting_support import INTERVAL_S, STALL_AFTER_S, Recorded, tool

STEP_MS = round(INTERVAL_S * 1000)
INSTANCE = "engine:8000"
SETTINGS = RulesSettings(
    stall_after_s=STALL_AFTER_S,
    down_after_s=1.0,
    scrape_interval_s=INTERVAL_S,
    evaluation_interval_s=INTERVAL_S,
    gpu_window_s=1.0,  # the simulator's DCGM page averages the last engine second
)


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "settings",
    [
        SETTINGS,
        RulesSettings(),
        RulesSettings(gpu=False, engine_selector='job="vllm"'),
        RulesSettings(gpu_selector='{Hostname="node-1"}', idle_gpu_perc=0, stall_after_s=90.5),
        RulesSettings(gpu_match_labels="instance, job"),
    ],
    ids=["short", "defaults", "no-gpu", "selectors", "gpu-match"],
)
def test_promtool_check_rules_passes_on_every_variant(
    settings: RulesSettings, tmp_path: Path
) -> None:
    (tmp_path / "rules.yml").write_text(rules_yaml(settings))
    result = _promtool("check", "rules", "rules.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(g["rules"]) for g in rules_document(settings)["groups"])
    assert f"SUCCESS: {count} rules found" in result.stdout


def _stall_alert(kind: str) -> dict[str, Any]:
    """The EngineStalled alert of `kind` as promtool reports it for the test engine."""
    doc = rules_document(SETTINGS)
    rule = next(r for r in doc["groups"][1]["rules"] if r["labels"].get("kind") == kind)
    out = dict(rule["annotations"])
    out["summary"] = out["summary"].replace("{{ $labels.instance }}", INSTANCE)
    labels = {"instance": INSTANCE, "job": "vllm", "severity": "critical", "kind": kind}
    if kind != "dead_core":  # the dead core's alert reads `up`, which has no model label
        labels["model_name"] = "stallkit-sim"
    return {"exp_labels": labels, "exp_annotations": out}


def _case(eval_ms: int, alert: str, firing: list[dict[str, Any]]) -> dict[str, Any]:
    return {"eval_time": f"{eval_ms}ms", "alertname": alert, "exp_alerts": firing}


def _promtool_test(series: Any, cases: list[dict[str, Any]], tmp_path: Path) -> None:
    """Run `promtool test rules` on `rules.yml` in `tmp_path` with these series and cases."""
    doc = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": f"{STEP_MS}ms",
        "tests": [{"interval": f"{STEP_MS}ms", "input_series": series, "alert_rule_test": cases}],
    }
    (tmp_path / "tests.yml").write_text(json.dumps(doc, indent=1))  # JSON is YAML
    result = _promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _run_tests(rec: Recorded, cases: list[dict[str, Any]], tmp_path: Path) -> None:
    series, _points = input_series(rec.lines, INTERVAL_S, instance=INSTANCE)
    (tmp_path / "rules.yml").write_text(rules_yaml(SETTINGS))
    _promtool_test(series, cases, tmp_path)


#: every kind's alert fires one evaluation after the detector's verdict: its conditions are
#: rates over the last two scrapes, true one scrape after the detector's onset
LAG_STEPS = 1


@pytest.mark.parametrize("kind", STALL_KINDS)
def test_each_kind_fires_its_own_alert_alone_after_onset_plus_stall_after(
    kind: str, timelines: dict[str, Recorded], tmp_path: Path
) -> None:
    rec = timelines[kind]
    (started,) = rec.of("stall_started")
    assert started["kind"] == kind
    due_ms = round(started["t"] * 1000) + LAG_STEPS * STEP_MS
    end = round(rec.lines[-1]["t"] / INTERVAL_S)
    alert = _stall_alert(kind)
    # at every evaluation: nothing before it is due, then this kind's alert and no other
    cases = [
        _case(k * STEP_MS, "EngineStalled", [alert] if k * STEP_MS >= due_ms else [])
        for k in range(end + 1)
    ]
    cases.append(_case(due_ms, "EngineMetricsDown", []))
    _run_tests(rec, cases, tmp_path)


def test_healthy_arm_never_fires(timelines: dict[str, Recorded], tmp_path: Path) -> None:
    rec = timelines["healthy"]
    assert not rec.of("stall_started")
    assert max(x["gen_tok_s"] for x in rec.of("sample")) > 0
    end = round(rec.lines[-1]["t"] / INTERVAL_S)
    cases = [_case(k * STEP_MS, "EngineStalled", []) for k in range(end + 1)]
    _run_tests(rec, cases, tmp_path)


def test_metrics_down_is_the_down_alert_not_the_stall(
    timelines: dict[str, Recorded], tmp_path: Path
) -> None:
    rec = timelines["down"]
    downs = rec.of("down")
    assert downs and not rec.of("stall_started")
    end = round(rec.lines[-1]["t"] / INTERVAL_S)
    first_down = round(downs[0]["t"] / INTERVAL_S)
    down_alert = {
        "exp_labels": {"instance": INSTANCE, "job": "vllm", "severity": "warning"},
        "exp_annotations": {
            "summary": f"{INSTANCE}: /metrics does not answer (engine down; not a stall)"
        },
    }
    cases = [_case(k * STEP_MS, "EngineStalled", []) for k in range(end + 1)]
    cases.append(_case((first_down + 9) * STEP_MS, "EngineMetricsDown", []))
    cases.append(_case((first_down + 10) * STEP_MS, "EngineMetricsDown", [down_alert]))
    _run_tests(rec, cases, tmp_path)


def test_watchdog_alert_fires_on_stallkits_own_metric(tmp_path: Path) -> None:
    (tmp_path / "rules.yml").write_text(rules_yaml(SETTINGS))
    labels = 'arm="base",engine="http://e:1"'
    series = [
        {"series": f'stallkit_stall_active{{{labels},kind="spinning"}}', "values": "0 0 1 1 0"},
        {"series": f'stallkit_stall_active{{{labels},kind="frozen"}}', "values": "0 0 0 0 0"},
    ]
    firing = {
        "exp_labels": {
            "arm": "base",
            "engine": "http://e:1",
            "kind": "spinning",
            "severity": "critical",
        },
        "exp_annotations": {
            "summary": "stallkit's monitor sees a spinning stall on http://e:1",
            "description": "From the exporter of `kit monitor --metrics-port` (the detector itself).",
        },
    }
    cases = [
        _case(k * STEP_MS, "StallkitDetectedStall", [firing] if k in (2, 3) else [])
        for k in range(5)
    ]
    _promtool_test(series, cases, tmp_path)


def test_frozen_fires_without_any_gpu_series(
    timelines: dict[str, Recorded], tmp_path: Path
) -> None:
    # DCGM missing (or its scrape failing): the GPUs are no evidence, the stall still fires
    rec = Recorded([x for x in timelines["frozen"].lines if x["type"] != "gpu"])
    (started,) = rec.of("stall_started")
    due_ms = round(started["t"] * 1000) + STEP_MS
    end = round(rec.lines[-1]["t"] / INTERVAL_S)
    alert = _stall_alert("frozen")
    cases = [
        _case(k * STEP_MS, "EngineStalled", [alert] if k * STEP_MS >= due_ms else [])
        for k in range(end + 1)
    ]
    _run_tests(rec, cases, tmp_path)


def test_a_dead_core_that_only_had_waiting_requests_fires(tmp_path: Path) -> None:
    # a blocked engine (nothing running, two waiting) whose core dies at the fifth scrape
    labels = f'engine="0",instance="{INSTANCE}",job="vllm",model_name="stallkit-sim"'
    rows = {
        "vllm:num_requests_running": "0 0 0 0",
        "vllm:num_requests_waiting": "2 2 2 2",
        "vllm:generation_tokens_total": "5 5 5 5",
    }
    stale = " stale" + " _" * 19
    series = [{"series": f'up{{instance="{INSTANCE}",job="vllm"}}', "values": "1+0x23"}]
    series += [{"series": f"{n}{{{labels}}}", "values": v + stale} for n, v in rows.items()]
    (tmp_path / "rules.yml").write_text(rules_yaml(SETTINGS))
    due_ms = 4 * STEP_MS + round(STALL_AFTER_S * 1000)
    alert = _stall_alert("dead_core")
    cases = [
        _case(k * STEP_MS, "EngineStalled", [alert] if k * STEP_MS >= due_ms else [])
        for k in range(4, 24)
    ]
    _promtool_test(series, cases, tmp_path)


def test_a_stopped_core_with_blocked_gauges_is_frozen_and_a_stepping_one_blocked(
    tmp_path: Path,
) -> None:
    # two engines stream until the fifth scrape, then both show the gauges of a last step
    # with nothing running and two waiting; one is stopped (SIGSTOP: every series stays put),
    # the other steps over a request it cannot admit (its prefix-cache queries climb)
    def rows(queries: str) -> dict[str, str]:
        return {
            "vllm:num_requests_running": "1 1 1 1 1" + " 0" * 19,
            "vllm:num_requests_waiting": "2x23",
            "vllm:generation_tokens_total": "0+10x4 40x18",
            "vllm:prompt_tokens_total": "100x23",
            "vllm:num_preemptions_total": "0x23",
            "vllm:prefix_cache_queries_total": queries,
            "vllm:iteration_tokens_total_count": "0+10x4 40x18",
        }

    engines = {"stopped:8000": rows("0+100x4 400x18"), "stepping:8000": rows("0+100x23")}
    series = []
    for instance, values in engines.items():
        labels = f'engine="0",instance="{instance}",job="vllm",model_name="stallkit-sim"'
        series.append({"series": f'up{{instance="{instance}",job="vllm"}}', "values": "1x23"})
        series += [{"series": f"{n}{{{labels}}}", "values": v} for n, v in values.items()]
    (tmp_path / "rules.yml").write_text(rules_yaml(SETTINGS))

    def alert(kind: str, instance: str) -> dict[str, Any]:
        out = _stall_alert(kind)
        out["exp_labels"]["instance"] = instance
        out["exp_annotations"]["summary"] = out["exp_annotations"]["summary"].replace(
            INSTANCE, instance
        )
        return out

    # the detector's onset is the fifth scrape (its last token): the stall is judged
    # stall_after later and the alert fires one evaluation after that
    due_ms = 4 * STEP_MS + round(STALL_AFTER_S * 1000) + LAG_STEPS * STEP_MS
    firing = [alert("frozen", "stopped:8000"), alert("blocked", "stepping:8000")]
    cases = [
        _case(k * STEP_MS, "EngineStalled", firing if k * STEP_MS >= due_ms else [])
        for k in range(24)
    ]
    _promtool_test(series, cases, tmp_path)


def test_the_rules_check_the_kinds_in_the_detectors_order() -> None:
    from stallkit.monitor.detect.detector import SIGNATURES
    from stallkit.monitor.prometheus.rules import kind_conditions

    assert tuple(k for k, _ in SIGNATURES) == STALL_KINDS
    assert tuple(kind_conditions(SETTINGS)) == STALL_KINDS
    no_gpu = tuple(kind_conditions(SETTINGS.model_copy(update={"gpu": False})))
    assert no_gpu == tuple(k for k in STALL_KINDS if k != "busy_hang")
