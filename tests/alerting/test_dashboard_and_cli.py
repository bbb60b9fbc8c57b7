"""`kit rules` through the CLI runner, and the Grafana dashboard it ships: every expression
in it names series that exist (recorded by the rules, vLLM's golden list, DCGM, stallkit's
exporter, or Prometheus's own)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stallkit.contract.names import FORK_FAMILIES
from stallkit.kits.cli import app
from stallkit.monitor.on_stall.exporter import StallExporter
from stallkit.monitor.prometheus.rules import RECORDED
from stallkit.monitor.signals.dialects import DIALECTS
from tests.alerting.alerting_support import tool

GOLDEN = Path(__file__).parents[1] / "data" / "vllm-0.32-metric-families.txt"
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "on", "ignoring", "group_left",
    "group_right", "and", "or", "unless", "rate", "irate", "increase", "label_replace",
    "max_over_time", "min_over_time", "histogram_quantile", "offset",
}  # fmt: skip


def _known_series() -> set[str]:
    known = set(RECORDED) | {"DCGM_FI_DEV_GPU_UTIL", "ALERTS", "up", "vllm:scheduler_steps_total"}
    known |= set(FORK_FAMILIES)
    for dialect in DIALECTS:  # the other engines' families the rules read
        known |= set(dialect.samples)
    for line in GOLDEN.read_text().splitlines():
        name, kind = line.split()
        known.add(name)
        if kind == "histogram":
            known |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    exporter = StallExporter()
    exporter.sink("http://e:1", "a")  # creates every labelled series
    for family in exporter.registry.collect():
        known |= {sample.name for sample in family.samples}
    return known


def series_names(expr: str) -> set[str]:
    """The metric names an expression reads (strings, matchers, ranges and groupings cut)."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', "", expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", text)
    names = set(re.findall(r"(?<![\w$:])[A-Za-z_:][\w:]*", text))
    return {n for n in names if n not in PROMQL_WORDS}


def test_series_names_reads_names_not_labels_or_functions() -> None:
    expr = 'sum by (instance, reason) (rate(vllm:x_total{a="b:c"}[5m])) or on () up'
    assert series_names(expr) == {"vllm:x_total", "up"}


def test_every_dashboard_expression_names_existing_series(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["rules", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    dashboard = json.loads((tmp_path / "stallkit-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for part in ("generation rate", "waiting by reason", "kv", "gpu", "stall state"):
        assert part in titles
    known = _known_series()
    named = set().union(*(series_names(e) for e in exprs))
    assert named <= known, named - known
    assert {"stallkit:stall_condition", "stallkit_stall_active", "DCGM_FI_DEV_GPU_UTIL"} <= named


def test_kit_rules_takes_thresholds_from_the_kit_and_flags(tmp_path: Path) -> None:
    runner = CliRunner()
    kit = tmp_path / "k.toml"
    kit.write_text(
        'name = "k"\n[load]\nduration_s = 60\n[monitor]\nstall_after_s = 42\nidle_gpu_perc = 7\n'
    )
    text = runner.invoke(app, ["rules", "--kit", str(kit)]).output
    assert 'for: "42s"' in text and "> 7" in text
    text = runner.invoke(
        app, ["rules", "--kit", str(kit), "--stall-after", "90", "--no-gpu"]
    ).output
    assert 'for: "90s"' in text and "DCGM" not in text.split("annotations")[0]
    assert "no GPU series: judged on engine metrics alone" in text
    (tmp_path / "r.yml").write_text(text)
    check = subprocess.run([tool("promtool"), "check", "rules", str(tmp_path / "r.yml")],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr


def test_kit_rules_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    for args in (["--stall-after", "-1"], ["--kit", "no-such-kit"], ["--scrape-interval", "0"]):
        result = runner.invoke(app, ["rules", *args])
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(app, ["rules", "--out", str(blocker / "sub")])
    assert result.exit_code == 2 and "cannot write" in result.output


@pytest.mark.parametrize(
    "selector",
    ['job="vllm', "job=vllm", 'job="a" instance="b"', '1job="a"', 'job=="a"', "{job}"],
)
def test_a_selector_promtool_would_refuse_is_refused_before_any_rule_is_written(
    selector: str, tmp_path: Path
) -> None:
    for flag in ("--engine-selector", "--gpu-selector"):
        result = CliRunner().invoke(app, ["rules", flag, selector, "--out", str(tmp_path / "r")])
        assert result.exit_code == 2, (flag, selector, result.output)
        assert f"invalid {flag}: " in result.output and "PromQL label matchers" in result.output
        assert not (tmp_path / "r").exists()


def test_the_selectors_accepted_give_rules_promtool_accepts(tmp_path: Path) -> None:
    accepted = ['job="vllm"', '{job="vllm"}', 'job=~\'v.*\', instance!="a\\"b"', "job=`x`,"]
    for i, selector in enumerate(accepted):
        args = ["rules", "--engine-selector", selector, "--gpu-selector", selector]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, (selector, result.output)
        path = tmp_path / f"r{i}.yml"
        path.write_text(result.output)
        check = subprocess.run([tool("promtool"), "check", "rules", str(path)],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert check.returncode == 0, (selector, check.stdout + check.stderr)
