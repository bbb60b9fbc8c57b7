"""The `llamacpp:` spec, its kind, the server's arguments, the build's pure parts, and the checks
made before an arm starts. No build and no server: these run in CI."""

from __future__ import annotations

from pathlib import Path

import pytest

from stallkit.engine import LlamacppSpec, parse_spec
from stallkit.engine.errors import EngineError
from stallkit.engine.launch.llamacpp import build as build_mod
from stallkit.engine.launch.llamacpp.build import (
    LLAMACPP_VERSION,
    SERVER_ENV,
    BuildMarker,
    LlamacppBuild,
    check_version,
    find_server,
)
from stallkit.engine.launch.llamacpp.launcher import check_llamacpp, server_args
from stallkit.kits.arm.kinds import kind_of


def test_the_spec_names_its_gguf_file_and_runs_on_the_cpu() -> None:
    spec = parse_spec("llamacpp:~/models/tiny.gguf")
    assert isinstance(spec, LlamacppSpec)
    assert spec.model_path == spec.target == "~/models/tiny.gguf"
    assert spec.capabilities.gpu is False and spec.capabilities.step_counter is False
    kind = kind_of(spec)
    assert (kind.tag, kind.target, kind.runs_virtual("virtual")) == ("llamacpp", "local", False)


def test_a_spec_without_a_file_is_refused_with_the_command_that_writes_one() -> None:
    with pytest.raises(EngineError) as caught:
        parse_spec("llamacpp:")
    assert caught.value.hint is not None and "tiny-gguf" in caught.value.hint


def test_the_server_listens_on_loopback_port_0_with_metrics_and_a_slot_per_agent() -> None:
    args = server_args(Path("/m/tiny.gguf"), slots=7, ctx_per_slot=4300, threads=2)
    assert args == [
        "--model", "/m/tiny.gguf", "--host", "127.0.0.1", "--port", "0", "--metrics",
        "--no-webui", "--parallel", "7", "--ctx-size", "30100", "--threads", "2",
        "--alias", "tiny",
    ]  # fmt: skip


def test_a_flag_the_kit_sets_in_any_spelling_is_not_set_twice() -> None:
    kit_args = ["-np", "2", "--ctx-size=8192", "-t", "1", "--cont-batching"]
    args = server_args(Path("/m/x.gguf"), slots=7, ctx_per_slot=100, engine_args=kit_args)
    assert args[-len(kit_args) :] == kit_args
    ours = args[: -len(kit_args)]
    assert "--parallel" not in ours and "--ctx-size" not in ours and "--threads" not in ours
    assert ours[-2:] == ["--alias", "x"]


def test_an_arm_without_a_built_server_is_refused_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STALLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(SERVER_ENV, raising=False)
    with pytest.raises(EngineError) as caught:
        check_llamacpp("llamacpp:m.gguf", "m.gguf")
    assert "not built here" in str(caught.value)
    assert caught.value.hint is not None and "kit engine llamacpp build" in caught.value.hint
    monkeypatch.setenv(SERVER_ENV, str(tmp_path / "nothing"))
    with pytest.raises(EngineError, match=r"names .*nothing, no file"):
        check_llamacpp("llamacpp:m.gguf", "m.gguf")


def test_a_missing_model_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = tmp_path / "llama-server"
    server.write_text("")
    monkeypatch.setenv(SERVER_ENV, str(server))
    with pytest.raises(EngineError) as caught:
        check_llamacpp("llamacpp:gone.gguf", str(tmp_path / "gone.gguf"))
    assert "no GGUF model file" in str(caught.value)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert check_llamacpp("x", str(tmp_path / "m.gguf")) == (server, tmp_path / "m.gguf")


def test_a_build_counts_only_once_its_marker_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STALLKIT_CACHE", str(tmp_path))
    monkeypatch.delenv(SERVER_ENV, raising=False)
    build = LlamacppBuild("0.3.36")
    assert build.path.parent == tmp_path / "llama.cpp" / "0.3.36"
    build.server.parent.mkdir(parents=True)
    build.server.write_bytes(b"\x7fELF")
    assert build.marker() is None and find_server("0.3.36") is None  # a build cut short
    marker = BuildMarker(version="0.3.36", machine=build.path.name, cmake_flags=[], build_s=1.0,
                         cpu_s=2.0, jobs=2, binary_bytes=4)  # fmt: skip
    (build.path / build_mod.MARKER).write_text(marker.model_dump_json())
    assert build.marker() == marker and find_server("0.3.36") == build.server


@pytest.mark.parametrize(
    ("line", "fraction"),
    [
        ("[12/200] Building CXX object src/llama.cpp.o", 0.06),
        ("[ 45%] Building CXX object", 0.45),
        ("[100%] Linking CXX executable ../../bin/llama-server", 1.0),
        ("-- Configuring done", None),
    ],
)
def test_the_build_tools_counters_are_read_as_progress(line: str, fraction: float | None) -> None:
    assert build_mod._fraction(line) == fraction


@pytest.mark.parametrize("version", ["0.3.36", "0.3.16.post1", "0.4.0rc1"])
def test_release_numbers_pass(version: str) -> None:
    check_version(version)


@pytest.mark.parametrize("version", ["latest", "0.3.36; rm -rf /", "", "v0.3"])
def test_anything_else_is_no_release_number(version: str) -> None:
    with pytest.raises(EngineError, match="no llama-cpp-python release number"):
        check_version(version)


def test_kit_engine_llamacpp_build_refuses_a_bad_version_in_one_line() -> None:
    from typer.testing import CliRunner

    from stallkit.kits.cli import app

    done = CliRunner().invoke(app, ["engine", "llamacpp", "build", "--sdist-version", "latest"])
    assert done.exit_code == 2, done.output
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and "no llama-cpp-python release number" in lines[0], done.output


def test_an_sdist_of_another_release_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from stallkit.kits.cli import app

    sdist = tmp_path / "llama_cpp_python-0.3.1.tar.gz"
    sdist.write_bytes(b"")
    done = CliRunner().invoke(app, ["engine", "llamacpp", "build", "--sdist", str(sdist)])
    assert done.exit_code == 2, done.output
    assert f"is not the llama-cpp-python {LLAMACPP_VERSION} sdist" in done.output
    assert not (tmp_path / "llama.cpp").exists()


def test_a_missing_or_broken_sdist_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from stallkit.kits.cli import app

    monkeypatch.setenv("STALLKIT_CACHE", str(tmp_path / "cache"))
    missing = tmp_path / f"llama_cpp_python-{LLAMACPP_VERSION}.tar.gz"
    junk = tmp_path / "junk" / missing.name
    junk.parent.mkdir()
    junk.write_text("not a tarball\n")  # tarfile's own text for it runs over five lines
    for sdist, says in ((missing, "not a file"), (junk, "not a tar archive")):
        done = CliRunner().invoke(app, ["engine", "llamacpp", "build", "--sdist", str(sdist)])
        lines = done.output.strip().splitlines()
        assert done.exit_code == 2 and len(lines) == 1 and says in lines[0], done.output
