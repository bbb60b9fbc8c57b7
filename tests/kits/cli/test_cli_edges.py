"""Rough edges a new user hit, each through a real `kit` process: exit codes and one-line errors.

Help and version, bare groups, flag values blamed on the flag, engine spec forms refused the
same way with and without --dry-run, failed runs that leave nothing behind, the one-arm
report, `kit load` with small contexts, and the progress line without a terminal.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stallkit.contract.gpu import GpuSource
from stallkit.engine.launch.base import free_port
from stallkit.monitor.signals.gpu import probe_engine_dcgm
from tests.support import kit, one_error_line, served_sim

REPO = Path(__file__).resolve().parents[3]

COMMANDS = [
    [], ["load"], ["monitor"], ["run"], ["ab"], ["report"], ["sim"], ["sim", "trace"],
    ["sim", "serve"], ["engine"], ["engine", "tiny-model"],
]  # fmt: skip


def test_bare_kit_and_bare_groups_print_help_and_exit_0() -> None:
    for group in ([], ["sim"], ["engine"]):
        done = kit(*group)
        assert done.returncode == 0, done.stderr
        assert "Usage: kit" in done.stdout and "Commands:" in done.stdout


def test_version() -> None:
    done = kit("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("stallkit ") and done.stdout.split()[1][0].isdigit()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "kit")
def test_help_shows_no_bool_metavar_and_stands_alone(command: list[str]) -> None:
    done = kit(*command, "--help")
    assert done.returncode == 0, done.stderr
    assert "--help" in done.stdout
    assert "<bool>" not in done.stdout
    assert "DESIGN" not in done.stdout


def test_flag_values_are_blamed_on_the_flag_not_the_kit_file() -> None:
    line = one_error_line(kit("run", "--engine", "sim:base", "--duration", "-5"))
    assert "--duration" in line and ".toml" not in line and "duration_s" not in line
    args = ["ab", "--min-context", "200", "--max-context", "2000", "--seed", "3", "--dry-run"]
    line = one_error_line(kit(*args))
    # the check that failed names min_context: its flag is blamed, not the unrelated --seed
    assert "--min-context" in line and ".toml" not in line and "--seed" not in line


@pytest.mark.parametrize("dry_run", [True, False])
def test_unknown_spec_forms_are_refused_with_the_list_of_forms(
    dry_run: bool, fake_docker: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ab"
    # the fake docker has every image except those whose name says "missing"
    args = ["ab", "--base", "nosuch:missing", "--out", str(out), *(["--dry-run"] * dry_run)]
    line = one_error_line(kit(*args))
    assert "unknown engine spec form 'nosuch:'" in line and "no local docker image" in line
    for form in ("sim:base", "url:http://HOST:PORT", "vllm:DIR", "docker image", "kit run --help"):
        assert form in line
    assert "registry login" not in line and not out.exists()
    calls = [json.loads(x) for x in (fake_docker / "calls.jsonl").read_text().splitlines()]
    # asked (and the daemon asked whether it answers at all), never pulled
    assert calls == [
        ["image", "inspect", "nosuch:missing"],
        ["info", "--format", "{{json .ServerVersion}}"],
    ]


def test_image_references_are_images(fake_docker: Path) -> None:
    images = ("library/ubuntu:22.04", "registry:5000/team/engine:fix", "vllm/vllm-openai")
    for image in (*images, "localbuild:fix"):  # the last: a local image without a path
        done = kit("ab", "--base", image, "--dry-run")
        assert done.returncode == 0, done.stderr
        assert f"base: {image} (docker;" in done.stdout
    calls = [json.loads(x) for x in (fake_docker / "calls.jsonl").read_text().splitlines()]
    looked_up = [c for c in calls if c[0] == "image"]
    assert looked_up == [["image", "inspect", "localbuild:fix"]]  # only a bare name is looked up


def test_a_run_that_fails_before_recording_anything_leaves_nothing(tmp_path: Path) -> None:
    # the engine cannot start: its model directory is missing, or (a [dev] install) vLLM is
    args = ["run", "--engine", f"vllm:{tmp_path / 'nope'}", "--kit", "cpu-smoke", "--out"]
    why = "not a model directory" if importlib.util.find_spec("vllm") else "needs vLLM"
    out = tmp_path / "v"
    assert why in one_error_line(kit(*args, str(out)))
    assert not out.exists()
    # nor the folders it made to hold it
    nested = tmp_path / "new" / "deeper" / "v"
    assert why in one_error_line(kit(*args, str(nested)))
    assert not (tmp_path / "new").exists()
    # an empty directory the user made for the run is theirs: a failed run leaves it in place
    mine = tmp_path / "mine"
    mine.mkdir()
    assert why in one_error_line(kit(*args, str(mine)))
    assert mine.is_dir()


def test_an_out_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    file = tmp_path / "taken"
    file.write_text("notes\n")
    line = one_error_line(kit("ab", "--seeds", "1", "--duration", "60", "--out", str(file)))
    assert "is not a directory" in line
    assert file.read_text() == "notes\n"


def test_an_unreachable_url_arm_names_what_to_check(tmp_path: Path) -> None:
    kit_file = tmp_path / "quick.toml"
    source = (REPO / "kits" / "shipped" / "restore-stall.toml").read_text()
    kit_file.write_text(source.replace("startup_timeout_s = 1800", "startup_timeout_s = 1"))
    assert kit_file.read_text() != source
    out = tmp_path / "u"
    url = f"http://127.0.0.1:{free_port()}"
    args = ["run", "--engine", f"url:{url}", "--kit", str(kit_file), "--no-dashboard"]
    line = one_error_line(kit(*args, "--out", str(out)))
    assert "None" not in line and f"{url}/health" in line and "url: specs attach" in line
    assert not out.exists()


@pytest.mark.wallclock
def test_a_one_arm_run_writes_its_own_report(tmp_path: Path) -> None:
    out = tmp_path / "r"
    done = kit(
        "run", "--engine", "sim:fix", "--duration", "30", "--time-scale", "30",
        "--agents", "2", "--no-dashboard", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (out / "ab.md").exists() and not (out / "ab.json").exists()
    md = (out / "run.md").read_text()
    assert md.startswith("# run: restore-stall, 1 seed, wall clock\n") and "A/B" not in md
    assert "like for like" not in md
    assert "run" in json.loads((out / "run.json").read_text())["arms"]
    assert "run: restore-stall" in done.stdout and "A/B" not in done.stdout
    # notes in words, without the source line that printed them
    assert "run: ran its duration after" in done.stdout and "view.py" not in done.stdout
    # `kit report` re-makes the same files
    (out / "run.md").unlink()
    again = kit("report", str(out))
    assert again.returncode == 0, again.stderr
    assert (out / "run.md").read_text() == md and not (out / "ab.md").exists()


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    """`kit sim serve` in its own process, at 1x."""
    with served_sim() as url:
        yield url


@pytest.mark.wallclock
def test_a_url_arm_on_a_fast_simulator_takes_the_scale_it_states(tmp_path: Path) -> None:
    """Attached to `kit sim serve --time-scale 20`, a run's engine seconds are the simulator's:
    120 engine s of load take about 6 wall s, and the report counts engine seconds."""
    with served_sim("--time-scale", "20") as url:
        out = tmp_path / "attached"
        args = ["run", "--engine", f"url:{url}", "--duration", "120", "--no-dashboard"]
        done = kit(*args, "--out", str(out), timeout=100)
    assert done.returncode == 0, done.stderr
    assert "engine runs at 20x" in done.stdout
    meta = json.loads((out / "meta.json").read_text())
    assert meta["time_scale"] == 20.0 and meta["end_reason"] == "duration"
    # at the nominal 1x it would have run 120 wall s, and called them 2400 engine s
    assert meta["wall_s"] < 40 and 115 <= meta["engine_s"] <= 160, meta
    assert re.search(r"run length[\s│]*1[1-5]\d s(, \d+ s under load)?\s*(│|\n)", done.stdout), (
        done.stdout
    )
    # an attached engine's log is not read: no log rows claim a clean 0
    assert "(log)" not in done.stdout and meta["spec"].startswith("url:")


@pytest.mark.wallclock
def test_load_with_small_contexts_fits_its_turns_to_them(sim_url: str, tmp_path: Path) -> None:
    done = kit(
        "load", sim_url, "--agents", "2", "--min-context", "200", "--max-context", "2000",
        "--max-turns", "1", "--out", str(tmp_path / "load"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [json.loads(x) for x in (tmp_path / "load" / "turns.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["outcome"] == "ok" for r in records), records
    assert all(r["prompt_tokens"] + r["max_tokens"] <= 2000 for r in records)
    # without a terminal the last progress line ends, so the summary starts on its own line
    assert done.stderr.endswith("\n") and "timeouts" in done.stderr
    assert done.stdout.lstrip().startswith("load summary")


def _gpu_lines(run_dir: Path) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in (run_dir / "timeline.jsonl").read_text().splitlines()]
    return [line for line in lines if line["type"] == "gpu"]


@pytest.mark.wallclock
def test_monitor_and_a_url_arm_pick_the_engines_dcgm_page_by_default(
    sim_url: str, tmp_path: Path
) -> None:
    """`auto` is resolved in one place: `kit monitor URL` and a `kit run` arm attached to the
    same engine both find its DCGM page and record its GPU readings."""
    args = ["monitor", sim_url, "--duration", "1", "--interval", "0.2", "--no-dashboard"]
    done = kit(*args, "--out", str(tmp_path / "monitor"))
    assert done.returncode == 0, done.stderr
    dcgm = f"dcgm:{sim_url}/dcgm/metrics"
    # wrapped between words to the terminal's width
    assert f"gpu source: {dcgm} (auto: the engine serves DCGM)" in " ".join(done.stderr.split())
    args = ["run", "--engine", f"url:{sim_url}", "--duration", "3", "--agents", "2"]
    ran = kit(*args, "--no-dashboard", "--out", str(tmp_path / "run"))
    assert ran.returncode == 0, ran.stderr
    assert "(auto: the engine serves DCGM)" in " ".join(ran.stdout.split()), ran.stdout
    # the same GPUs, read from the same page, in both timelines
    gpus = {
        name: {tuple(line["util"]) for line in _gpu_lines(tmp_path / name)}
        for name in ("monitor", "run")
    }
    assert gpus["monitor"] == gpus["run"] == {("0", "1")}, gpus
    assert probe_engine_dcgm(sim_url) == (GpuSource.parse(dcgm), "the engine serves DCGM")
    assert probe_engine_dcgm(sim_url + "/nothing") == (
        GpuSource("none"),
        f"no DCGM page at {sim_url}/nothing/dcgm/metrics",
    )
    assert probe_engine_dcgm(f"http://127.0.0.1:{free_port()}") == (GpuSource("none"), "")


def test_load_bounds_that_cannot_fit_a_turn_say_the_limits_in_flags() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    line = one_error_line(kit("load", url, "--min-context", "2000", "--max-context", "200"))
    assert "--min-context (2000)" in line and "--max-context (200)" in line
    line = one_error_line(kit("load", url, "--min-context", "2000", "--max-context", "2001"))
    assert "raise --max-context to at least" in line
    for internal in ("system_prompt_tokens", "min_context", "max_context"):
        assert internal not in line.replace("--min-context", "").replace("--max-context", "")
