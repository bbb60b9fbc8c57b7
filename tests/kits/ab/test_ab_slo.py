"""The two-sided verdict end to end: a fix made 30 % slower stalls less but loses goodput.

Slow tier: two `kit ab` runs of the README kit on the virtual clock (deterministic), five seeds
whose base arm livelocks within 1000 engine seconds, about 6 s of CPU each: the smallest run
in which both halves of the verdict are significant. The slowed fix (`[sim] step_cost_scale`)
must be reported as stalling less but worse than the base by more than the margin on goodput,
and `--strict` must exit 1 for it; the unchanged fix passes both, and `--strict` exits 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from stallkit.engine import parse_spec, reset_prefix_cache
from stallkit.kits.ab.plan import Plan
from stallkit.kits.arm.kinds import kind_of
from stallkit.kits.errors import KitError
from stallkit.kits.kit import load_kit
from tests.serving import threaded_server
from tests.support import kit

REPO = Path(__file__).resolve().parents[3]
#: seeds whose base arm livelocks at 501-901 engine s on the README kit
SEEDS = "8,15,18,23,28"


def _kit_file(tmp_path: Path, scale: str | None) -> Path:
    text = (REPO / "kits" / "shipped" / "restore-stall.toml").read_text()
    if scale is not None:
        text = text.replace("time_scale = 30\n", f"time_scale = 30\nstep_cost_scale = {scale}\n")
    path = tmp_path / "kit.toml"
    path.write_text(text)
    return path


def _ab(tmp_path: Path, scale: str | None) -> tuple[int, str, dict[str, Any]]:
    out = tmp_path / "ab"
    args = ["ab", "--kit", str(_kit_file(tmp_path, scale)), "--seeds", SEEDS]
    done = kit(*args, "--duration", "1200", "--strict", "--no-dashboard", "--out", str(out))
    return done.returncode, done.stderr, json.loads((out / "ab.json").read_text())


def _goodput(data: dict[str, Any]) -> dict[str, Any]:
    (test,) = [t for t in data["verdict"]["noninferiority"] if t["figure"] == "goodput"]
    return dict(test)


@pytest.mark.slow
def test_a_fix_made_30_percent_slower_stalls_less_but_is_inferior_on_goodput(
    tmp_path: Path,
) -> None:
    code, stderr, data = _ab(tmp_path, "{fix = 1.3}")
    assert data["verdict"]["conclusion"] == "fix_better"
    goodput = _goodput(data)
    assert goodput["answer"] == "no" and goodput["method"] == "paired t over seeds"
    assert goodput["worse_ci90"][0] > 5.0  # worse by more than the margin, shown
    assert code == 1
    assert "strict: fix is worse than base by more than 5 % on goodput" in stderr
    md = (tmp_path / "ab" / "ab.md").read_text()
    assert "| fix is not worse than base by more than 5 % on goodput |  | no (" in md


@pytest.mark.slow
def test_the_unchanged_fix_passes_both_halves(tmp_path: Path) -> None:
    code, stderr, data = _ab(tmp_path, None)
    assert data["verdict"]["conclusion"] == "fix_better"
    assert _goodput(data)["answer"] == "yes"
    assert code == 0, stderr[-2000:]
    fix = data["arms"]["fix"]
    assert fix["slo"]["goodput_rps"]["ci95"] is not None
    assert all(seed["slo"]["window_s"] > 0 for seed in fix["seeds"])


@pytest.mark.wallclock
def test_the_step_cost_factor_reaches_the_arm_on_both_clocks(tmp_path: Path) -> None:
    slowed = load_kit(str(_kit_file(tmp_path, "{fix = 1.3}")))
    spec = parse_spec("sim:fix")
    plain = slowed.sim.engine.cost
    # the virtual clock: the arm's in-process core
    log = logging.getLogger("test")
    fix: Any = kind_of(spec).core(slowed, spec, "fix", log)
    base: Any = kind_of(spec).core(slowed, spec, "base", log)
    assert fix.config.cost.step_overhead_s == pytest.approx(1.3 * plain.step_overhead_s)
    assert base.config.cost == plain
    # the wall clock: the configuration the served simulator reads
    kind_of(spec).launcher("fix", spec, slowed, tmp_path / "fix", tmp_path / "fix.log", [])
    text = (tmp_path / "fix" / "sim-config.toml").read_text()
    assert f"prefill_per_token_s = {1.3 * plain.prefill_per_token_s!r}" in text
    # the plan says so
    plan = Plan.build(
        str(tmp_path / "kit.toml"), {"base": "sim:base", "fix": "sim:fix"}, None, {}, []
    )
    assert (
        "fix: sim:fix (sim; gpus -; wall clock, time scale 30; step cost x1.3)" in plan.describe()
    )


def test_a_step_cost_factor_for_an_arm_that_is_not_the_simulator_is_refused(
    tmp_path: Path,
) -> None:
    path = _kit_file(tmp_path, "{fix = 1.3}")
    with pytest.raises(KitError, match=r"sim\.step_cost_scale\.fix: url:http"):
        Plan.build(str(path), {"base": "sim:base", "fix": "url:http://127.0.0.1:1"}, None, {}, [])


class _CacheServer(ThreadingHTTPServer):
    """An engine that offers the reset endpoint (vLLM with VLLM_SERVER_DEV_MODE=1)."""

    def __init__(self, success: bool) -> None:
        self.success = success
        self.asked: list[str] = []
        super().__init__(("127.0.0.1", 0), _CacheHandler)


class _CacheHandler(BaseHTTPRequestHandler):
    server: _CacheServer

    def do_POST(self) -> None:
        self.server.asked.append(self.path)
        body = json.dumps({"success": self.server.success}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.mark.parametrize("success", [True, False])
def test_an_engine_offering_the_reset_drops_its_prefix_cache(success: bool) -> None:
    server = _CacheServer(success)
    with threaded_server(server) as url:
        said = reset_prefix_cache(url)
    assert server.asked == ["/reset_prefix_cache?reset_external=true"]
    assert said == (None if success else "not reset (the engine still held blocks)")


async def test_an_engine_without_the_reset_says_so(sim_server: Any) -> None:
    async with sim_server() as url:
        said = await asyncio.to_thread(reset_prefix_cache, url)
    assert said is not None and said.startswith("not offered by the engine")
    assert reset_prefix_cache("http://127.0.0.1:1", timeout_s=1.0) == "not reset (ConnectError)"


@pytest.mark.wallclock
@pytest.mark.slow
async def test_an_attached_engine_kept_across_seeds_is_asked_to_reset_and_meta_says_how(
    sim_server: Any, tmp_path: Path
) -> None:
    """The simulator offers no reset: each seed's meta.json says so (a fresh engine: nothing)."""
    async with sim_server(time_scale=100.0) as url:
        args = ["--base", f"url:{url}", "--fix", "sim:fix", "--clock", "wall", "--seeds", "2"]
        args += ["--duration", "60", "--agents", "2", "--time-scale", "100", "--no-dashboard"]
        done = await asyncio.to_thread(kit, "ab", *args, "--out", str(tmp_path / "ab"))
    assert done.returncode == 0, done.stderr[-3000:]
    for seed in (8, 9):
        base = json.loads((tmp_path / "ab" / "base" / f"seed-{seed}" / "meta.json").read_text())
        assert base["prefix_cache"].startswith("not offered by the engine"), base
        fix = json.loads((tmp_path / "ab" / "fix" / f"seed-{seed}" / "meta.json").read_text())
        assert "prefix_cache" not in fix
