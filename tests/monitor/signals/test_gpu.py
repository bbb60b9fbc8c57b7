"""GPU sources: flag parsing, nvidia-smi through a fake executable, DCGM text, start errors."""

from __future__ import annotations

import importlib.util
import os
import stat
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stallkit.contract.gpu import GpuSource, GpuSourceError
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.signals.gpu import (
    DcgmGpu,
    NoGpu,
    NvmlGpu,
    SmiGpu,
    gpu_source,
    parse_dcgm,
    parse_smi_csv,
    resolve_gpu_source,
)
from tests.serving import threaded_server

_LABELS = 'UUID="GPU-{uuid}",device="nvidia{i}",modelName="NVIDIA H100 80GB HBM3",Hostname="n7"'
DCGM_PAGE = "\n".join(
    [
        "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).",
        "# TYPE DCGM_FI_DEV_SM_CLOCK gauge",
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",' + _LABELS.format(uuid="6f1c0b3e", i=0) + "} 1980",
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",' + _LABELS.format(uuid="6f1c0b3e", i=0) + "} 87",
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",' + _LABELS.format(uuid="0a9d22c4", i=1) + "} 0",
        "",
    ]
)


def test_flag_strings() -> None:
    assert isinstance(gpu_source("none"), NoGpu)
    assert not gpu_source("none").checked
    assert isinstance(gpu_source("nvml:0,1"), NvmlGpu)
    assert isinstance(gpu_source("smi:0"), SmiGpu)
    src = gpu_source("dcgm:http://127.0.0.1:9400/metrics")
    assert isinstance(src, DcgmGpu) and src.checked
    assert isinstance(gpu_source(GpuSource("smi", (0, 1))), SmiGpu)
    for bad in ("", "cuda:0", "nvml:a,b", "dcgm:", "dcgm:9400", "none:1", "auto"):
        with pytest.raises(GpuSourceError):
            gpu_source(bad)


def test_parse_smi_csv() -> None:
    text = "0, 87, 70123\n1, 3, 512\n2, [N/A], 0\n\n"
    assert parse_smi_csv(text) == {"0": 87.0, "1": 3.0}


def test_parse_dcgm() -> None:
    assert parse_dcgm(DCGM_PAGE) == {"0": 87.0, "1": 0.0}
    assert parse_dcgm("# nothing here\n") == {}


def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """Put an executable `nvidia-smi` script first on PATH."""
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")


async def test_smi_source_reads_the_wanted_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_smi(
        tmp_path,
        monkeypatch,
        'case "$*" in *index,utilization.gpu*) printf "0, 91, 70000\\n1, 2, 100\\n2, 50, 9\\n";;'
        " *) exit 9;; esac",
    )
    source = gpu_source("smi:0,1")
    assert await source.start() == {"0": 91.0, "1": 2.0}
    assert await gpu_source("smi").start() == {"0": 91.0, "1": 2.0, "2": 50.0}
    with pytest.raises(MonitorError, match="no GPU 7"):
        await gpu_source("smi:0,7").start()


async def test_smi_source_failing_binary_is_a_start_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_smi(tmp_path, monkeypatch, 'echo "NVIDIA-SMI has failed because it could not communicate'
             ' with the NVIDIA driver." >&2; exit 9')  # fmt: skip
    with pytest.raises(MonitorError, match="could not communicate"):
        await gpu_source("smi:0").start()


async def test_smi_source_missing_binary_is_a_start_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MonitorError, match="cannot run nvidia-smi"):
        await gpu_source("smi:0").start()


@pytest.mark.skipif(
    importlib.util.find_spec("pynvml") is not None, reason="nvidia-ml-py is installed here"
)
async def test_nvml_without_bindings_is_a_start_error() -> None:
    with pytest.raises(MonitorError, match="nvidia-ml-py is not installed"):
        await gpu_source("nvml:0").start()


async def test_unreachable_dcgm_exporter_is_a_start_error() -> None:
    source = gpu_source("dcgm:http://127.0.0.1:9/metrics", timeout_s=1.0)
    try:
        with pytest.raises(MonitorError, match="dcgm:"):
            await source.start()
    finally:
        await source.close()


class _DcgmPage(BaseHTTPRequestHandler):
    """An engine that serves DCGM GPU utilisation at its DCGM path, as the simulator does."""

    def do_GET(self) -> None:
        found = self.path == "/dcgm/metrics"
        body = DCGM_PAGE.encode() if found else b"not here"
        self.send_response(200 if found else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def engine_url() -> Iterator[str]:
    with threaded_server(ThreadingHTTPServer(("127.0.0.1", 0), _DcgmPage)) as url:
        yield url


def test_auto_is_resolved_in_one_place_named_launchers_then_the_engine(engine_url: str) -> None:
    page = GpuSource("dcgm", url=f"{engine_url}/dcgm/metrics")
    smi, nvml = GpuSource("smi", (1,)), GpuSource("nvml", (0, 1))
    auto = GpuSource("auto")
    # a named source is taken as it is, whatever the launcher knows or the engine serves
    assert resolve_gpu_source(smi, engine_url, nvml) == (smi, "")
    # auto: the launcher's source where it knows one, even `none` (no GPUs pinned)
    assert resolve_gpu_source(auto, engine_url, nvml) == (nvml, "")
    assert resolve_gpu_source(auto, engine_url, GpuSource("none")) == (GpuSource("none"), "")
    # else the engine is asked: no launcher (`kit monitor URL`), or one that cannot know (url:)
    served = (page, "the engine serves DCGM")
    assert resolve_gpu_source(auto, engine_url) == served
    assert resolve_gpu_source(auto, engine_url, auto) == served
    missing = resolve_gpu_source(auto, engine_url + "/v2", auto)
    assert missing == (GpuSource("none"), f"no DCGM page at {engine_url}/v2/dcgm/metrics")
