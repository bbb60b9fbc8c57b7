"""`kit backtest --from-file` reads AIPerf's server-metrics export (`server_metrics_export.jsonl`)
as it reads OpenMetrics files: scripted scrapes of an engine that serves, then freezes with
two requests running, are replayed into one frozen stall; a line that is not a scrape is one
line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from stallkit.kits.cli import app
from stallkit.monitor.backtest.aiperf import aiperf_openmetrics

START_NS = 1_763_591_215_000_000_000
FREEZE_S = 4.0


def _scrape(t: float, tokens: float) -> dict[str, Any]:
    return {
        "endpoint_url": "http://127.0.0.1:8000/metrics",
        "timestamp_ns": START_NS + round(t * 1e9),
        "endpoint_latency_ns": 1_200_000,
        "metrics": {
            "vllm:num_requests_running": [{"labels": {"model_name": "m"}, "value": 2.0}],
            "vllm:num_requests_waiting": [{"labels": {"model_name": "m"}, "value": 0.0}],
            "vllm:generation_tokens_total": [{"labels": {"model_name": "m"}, "value": tokens}],
            "vllm:iteration_tokens_total": [
                {"histogram": {"1.0": tokens, "+Inf": tokens}, "sum": tokens, "count": tokens}
            ],
        },
    }


def _history(tmp_path: Path) -> Path:
    """Scrapes every 0.5 s for 12 s; frozen from 4 s. AIPerf leaves out a scrape identical to
    the one before it, so the frozen stretch is its first and its last scrape."""
    scrapes = [_scrape(k / 2, 100.0 * min(k / 2, FREEZE_S)) for k in range(25)]
    kept = [s for k, s in enumerate(scrapes) if k / 2 <= FREEZE_S + 0.5 or k == len(scrapes) - 1]
    path = tmp_path / "server_metrics_export.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in kept))
    return path


def test_aiperfs_scrapes_become_timed_openmetrics_samples() -> None:
    text = aiperf_openmetrics([_scrape(0.0, 5.0)])
    labels = 'instance="127.0.0.1:8000",job="aiperf"'
    assert f"up{{{labels}}} 1 1763591215.000" in text
    assert f'vllm:generation_tokens_total{{{labels},model_name="m"}} 5 1763591215.000' in text
    assert f"vllm:iteration_tokens_total_count{{{labels}}} 5 1763591215.000" in text
    assert text.endswith("# EOF\n")


def test_kit_backtest_replays_an_aiperf_export_into_a_frozen_stall(tmp_path: Path) -> None:
    args = ["backtest", "--from-file", str(_history(tmp_path)), "--no-gpu", "--stall-after", "3"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "127.0.0.1:8000: 1 stall(s)" in result.output, result.output
    [stall] = [json.loads(x) for x in (tmp_path / "r" / "stalls.jsonl").read_text().splitlines()]
    assert stall["kind"] == "frozen", stall


def test_a_line_that_is_no_scrape_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = _history(tmp_path)
    path.write_text(path.read_text() + json.dumps({"endpoint_url": "x"}) + "\n")
    result = CliRunner().invoke(app, ["backtest", "--from-file", str(path), "--out", "r"])
    assert result.exit_code == 2, result.output
    assert "not an AIPerf server-metrics scrape" in result.output
    assert "Traceback" not in result.output
