"""The reports' stall forensics quote the engine's own frames before library and metrics
frames: a scheduler's livelock is not explained by the metrics exporter that py-spy also
sampled, however busy it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stallkit.reports.forensics_frames import engine_first, frame_rank
from stallkit.reports.write import write_reports
from tests.reports.conftest import SeedArmWriter

_LEAVES = [
    "collect (prometheus_client/registry.py) 45%",
    "wait (threading.py) 25%",
    "_running_pass (engine/sim/running.py) 20%",
    "schedule (vllm/v1/core/sched/scheduler.py) 6%",
    "generate_latest (prometheus_client/exposition.py) 4%",
]


@pytest.mark.parametrize(
    ("frame", "rank"),
    [
        ("schedule (vllm/v1/core/sched/scheduler.py:312)", 0),
        ("Scheduler._step (engine/sim/scheduler.py) 61%", 0),
        ("step (/opt/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py:99)", 0),
        ("wait (threading.py:355)", 1),
        ("select (selectors.py:468) 3%", 1),
        ("run (uvicorn/server.py:70)", 1),
        ("_call_with_frames_removed (<frozen importlib._bootstrap>:488)", 1),
        ("collect (prometheus_client/registry.py:97)", 2),
        ("record (vllm/v1/metrics/loggers.py:120)", 2),
        ("log (vllm/engine/metrics.py:40) 2%", 2),
    ],
)
def test_frame_rank(frame: str, rank: int) -> None:
    assert frame_rank(frame) == rank


def test_engine_frames_first_each_group_hottest_first() -> None:
    assert engine_first(_LEAVES) == [
        "_running_pass (engine/sim/running.py) 20%",
        "schedule (vllm/v1/core/sched/scheduler.py) 6%",
        "wait (threading.py) 25%",
        "collect (prometheus_client/registry.py) 45%",
        "generate_latest (prometheus_client/exposition.py) 4%",
    ]


def test_run_html_quotes_the_schedulers_frames_first(
    tmp_path: Path, seed_arm: SeedArmWriter
) -> None:
    """A one-arm run (run.html, run.md) whose bundle's busiest functions are metrics code."""
    run = seed_arm(tmp_path, "base", 1, 400.0)
    bundle = run / "forensics" / "0000400000ms"
    bundle.mkdir(parents=True)
    manifest = {"onset": 400.0, "kind": "spinning", "top_frames": [], "hot_leaves": _LEAVES}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    write_reports(run)
    html = (run / "run.html").read_text()
    section = html[html.index("<h2>Stall forensics</h2>") :]
    assert "busiest functions in py-spy samples of the engine&#x27;s processes" in section
    first, second, third = (
        "<code>_running_pass (engine/sim/running.py) 20%</code>",
        "<code>schedule (vllm/v1/core/sched/scheduler.py) 6%</code>",
        '<code class="lib" title="library code">wait (threading.py) 25%</code>',
    )
    assert section.index(first) < section.index(second) < section.index(third)
    assert "prometheus_client" not in section  # three frames quoted: the engine's come first
    md = (run / "run.md").read_text()
    line = next(x for x in md.splitlines() if "forensics/0000400000ms" in x)
    assert line.index("engine/sim/running.py") < line.index("threading.py")
