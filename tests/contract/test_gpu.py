"""The GPU-source spec: every text form round-trips, bad forms are one line with the hint,
the kit's field is parsed once and saved as text, and `kit monitor --gpu-source` says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from stallkit.contract.gpu import SPEC_HINT, GpuSource, GpuSourceError, parse
from stallkit.engine.launch.attach import AttachLauncher
from stallkit.engine.spec import parse_spec
from stallkit.kits.errors import KitError
from stallkit.kits.kit import KitMonitor, load_kit

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("none", GpuSource()),
        ("auto", GpuSource("auto")),
        ("nvml", GpuSource("nvml")),
        ("nvml:0", GpuSource("nvml", (0,))),
        ("nvml:0,1", GpuSource("nvml", (0, 1))),
        ("smi", GpuSource("smi")),
        ("smi:3,1", GpuSource("smi", (3, 1))),
        (
            "dcgm:http://127.0.0.1:9400/metrics",
            GpuSource("dcgm", url="http://127.0.0.1:9400/metrics"),
        ),
        ("dcgm:https://gpu-box/metrics", GpuSource("dcgm", url="https://gpu-box/metrics")),
    ],
)
def test_every_form_round_trips(text: str, spec: GpuSource) -> None:
    assert parse(text) == spec == GpuSource.parse(f"  {text} ")
    assert str(spec) == text
    assert parse(str(spec)) == spec
    assert spec.checked == (spec.kind not in ("none", "auto"))


def test_kinds_are_case_insensitive_and_written_back_in_lower_case() -> None:
    assert str(parse("NVML:0, 1")) == "nvml:0,1"
    assert str(parse("None")) == "none"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nvml:", "no GPU ids"),
        ("smi:", "no GPU ids"),
        ("nvml:a", "bad GPU ids"),
        ("nvml:0,,1", "bad GPU ids"),
        ("smi:-1", "bad GPU ids"),
        ("dcgm:ftp://x", "dcgm needs an http(s) URL"),
        ("dcgm:", "dcgm needs an http(s) URL"),
        ("dcgm:9400", "dcgm needs an http(s) URL"),
        ("dcgm:http://", "dcgm needs an http(s) URL"),
        ("dcgm:http://h:port/metrics", "dcgm needs an http(s) URL"),
        ("dcgm", "unknown GPU source"),
        ("foo", "unknown GPU source"),
        ("", "unknown GPU source"),
        ("none:1", "unknown GPU source"),
        ("cuda:0", "unknown GPU source"),
    ],
)
def test_bad_forms_are_one_line_with_the_hint(text: str, says: str) -> None:
    with pytest.raises(GpuSourceError) as caught:
        parse(text)
    assert says in caught.value.message and "\n" not in caught.value.message
    assert caught.value.hint == SPEC_HINT


def test_the_spec_checks_itself_when_built_directly() -> None:
    for bad in (
        lambda: GpuSource("cuda"),  # type: ignore[arg-type]
        lambda: GpuSource("none", (0,)),
        lambda: GpuSource("dcgm"),
        lambda: GpuSource("nvml", url="http://h/m"),
        lambda: GpuSource("dcgm", url="ftp://h/m"),
        lambda: GpuSource("smi", (True,)),
    ):
        with pytest.raises(GpuSourceError):
            bad()


def test_the_kit_field_is_parsed_once_and_saved_as_text() -> None:
    kit = load_kit("cpu-smoke", {"monitor.gpu_source": "smi:1,0"})
    assert kit.monitor.gpu_source == GpuSource("smi", (1, 0))
    dumped = json.loads(kit.model_dump_json())
    assert dumped["monitor"]["gpu_source"] == "smi:1,0"
    assert KitMonitor.model_validate(dumped["monitor"]).gpu_source == kit.monitor.gpu_source
    assert KitMonitor().gpu_source == GpuSource("auto")
    assert KitMonitor.model_json_schema()["properties"]["gpu_source"]["type"] == "string"
    with pytest.raises(ValidationError, match="a GPU source is a string"):
        KitMonitor.model_validate({"gpu_source": 3})
    with pytest.raises(KitError) as caught:
        load_kit("cpu-smoke", {"monitor.gpu_source": "nvml:a"})
    assert "bad GPU ids in 'nvml:a'" in caught.value.message and SPEC_HINT in caught.value.message
    assert "\n" not in caught.value.message


def test_an_attached_engines_launcher_leaves_auto_to_the_engine() -> None:
    # it started nothing, so it cannot say which GPUs the engine uses: the engine is asked
    assert AttachLauncher(parse_spec("url:http://127.0.0.1:1")).gpu_source == GpuSource("auto")


@pytest.mark.parametrize("bad", ["nvml:", "dcgm:ftp://x"])
def test_kit_monitor_rejects_a_bad_gpu_source_in_one_line(bad: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stallkit", "monitor", "http://127.0.0.1:9", "--gpu-source", bad],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert repr(bad) in lines[0] and "nvml:0,1" in lines[0]


def test_a_kits_dcgm_url_is_checked_when_the_kit_loads() -> None:
    good = {"engine.host": {"dcgm_url": "{engine_url}/dcgm/metrics"}}
    assert load_kit("cpu-smoke", good).engine.host.dcgm_url == "{engine_url}/dcgm/metrics"
    with pytest.raises(KitError, match="dcgm needs an http"):
        load_kit("cpu-smoke", {"engine.host": {"dcgm_url": "ftp://gpu-box:9400/metrics"}})
