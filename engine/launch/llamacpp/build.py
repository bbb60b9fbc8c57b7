"""Build llama.cpp's server on this machine's CPU, once, from the `llama-cpp-python` sdist.

The sdist on PyPI vendors llama.cpp's sources (`vendor/llama.cpp`); `pip download` fetches it
(or `sdist=` names one already here), cmake builds only the `llama-server` target, and the
binary is kept under the user's cache (`$STALLKIT_CACHE`, else `~/.cache/stallkit`) in
`llama.cpp/VERSION/MACHINE/bin/llama-server`. The build is portable: `GGML_NATIVE=OFF` gives
x86-64's AVX2/FMA/F16C baseline (no AVX-512 or AMX code), so a cache copied to another CPU
of the same architecture does not die of an illegal instruction; static libraries, so the
binary stands alone; no OpenSSL, no web UI download, no network at run time. As for the
twin's vLLM environments, the cache (`stallkit.engine.cache`) holds it: a marker written last
says the build is complete, and a lock lets only one process build a version at a time.
Progress lines come from the build tool's own `[done/total]` counters, every tenth of the way.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, ConfigDict, Field

from stallkit.engine.cache import CachedBuild, build_once, cache_root, write_marker
from stallkit.engine.errors import EngineError

__all__ = [
    "LLAMACPP_VERSION",
    "SERVER_ENV",
    "BuildMarker",
    "LlamacppBuild",
    "build_server",
    "find_server",
]

#: the llama-cpp-python release whose vendored llama.cpp is built by default (tested here)
LLAMACPP_VERSION = "0.3.36"
#: an environment variable naming a llama-server binary to use instead of the cached build
SERVER_ENV = "STALLKIT_LLAMA_SERVER"
MARKER = "stallkit-build.json"
SDIST_PACKAGE = "llama-cpp-python"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_OPENMP=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
)
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+){1,3}((a|b|rc)[0-9]+)?(\.post[0-9]+)?$")
#: ninja's `[12/206]` and make's `[ 45%]`
_PROGRESS_RE = re.compile(r"^\[\s*(?:(\d+)/(\d+)|(\d+)%)\]")

Progress = Callable[[str], None]


class BuildMarker(BaseModel):
    """What a complete build holds; written last."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str = Field(description="The llama-cpp-python release whose llama.cpp was built.")
    machine: str = Field(description="The CPU architecture built for (platform.machine()).")
    cmake_flags: list[str] = Field(description="The cmake flags of the build.")
    build_s: float = Field(description="Wall seconds the build took (download included).")
    cpu_s: float = Field(description="CPU seconds the compilers used (user + system).")
    jobs: int = Field(description="Parallel compile jobs.")
    binary_bytes: int = Field(description="The size of bin/llama-server.")


class LlamacppBuild(CachedBuild):
    """The cached build of one version on this machine's architecture (built or not)."""

    def __init__(self, version: str = LLAMACPP_VERSION, root: Path | None = None) -> None:
        self.version = version
        self.path = (root or cache_root()) / "llama.cpp" / version / platform.machine()

    @property
    def server(self) -> Path:
        return self.path / "bin" / "llama-server"

    def marker(self) -> BuildMarker | None:
        """The marker of a complete build (None: not built, or cut short)."""
        try:
            text = (self.path / MARKER).read_text(encoding="utf-8")
            marker = BuildMarker.model_validate_json(text)
        except (OSError, ValueError):
            return None
        return marker if self.server.is_file() else None


def check_version(version: str) -> None:
    """One line when `version` is no release number (before anything is fetched)."""
    if not _VERSION_RE.match(version):
        raise EngineError(
            f"{version!r} is no llama-cpp-python release number",
            f"give one such as {LLAMACPP_VERSION}",
        )


def find_server(version: str = LLAMACPP_VERSION) -> Path | None:
    """The llama-server to run: `$STALLKIT_LLAMA_SERVER`, else the cached build (None: none)."""
    given = os.environ.get(SERVER_ENV)
    if given:
        return Path(given).expanduser()
    build = LlamacppBuild(version)
    return build.server if build.marker() is not None else None


def build_server(
    progress: Progress,
    version: str = LLAMACPP_VERSION,
    sdist: Path | None = None,
    jobs: int | None = None,
) -> LlamacppBuild:
    """The version's complete build, built first when it is not (a half build is redone)."""
    check_version(version)
    if sdist is not None and not sdist.is_file():
        raise EngineError(
            f"--sdist {sdist}: not a file", "check the path; without --sdist pip fetches it"
        )
    if sdist is not None and f"-{version}.tar" not in sdist.name:
        raise EngineError(
            f"{sdist.name} is not the {SDIST_PACKAGE} {version} sdist",
            f"give --sdist-version the sdist's release, or its file: llama_cpp_python-{version}.tar.gz",
        )
    build = LlamacppBuild(version)
    build_once(
        lambda: build.marker() is not None,
        build.lock_path,
        lambda: _build(build, progress, sdist, jobs or os.cpu_count() or 1),
    )
    return build


def _build(build: LlamacppBuild, progress: Progress, sdist: Path | None, jobs: int) -> None:
    started = time.monotonic()
    cpu_before = _children_cpu_s()
    shutil.rmtree(build.path, ignore_errors=True)
    with (
        tempfile.TemporaryDirectory(prefix="stallkit-llamacpp-") as tmp,
        build.log_path.open("w", encoding="utf-8") as log,
    ):
        work = Path(tmp)
        if sdist is None:
            progress(f"downloading the {SDIST_PACKAGE} {build.version} sdist")
            sdist = _download(build.version, work, log)
        source = _extract(sdist, work)
        progress(f"building llama-server ({jobs} jobs; 11 to 13 minutes of CPU in all)")
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        _run(["cmake", "-S", str(source), "-B", str(work / "build"), *generator, *CMAKE_FLAGS],
             log, build)  # fmt: skip
        command = ["cmake", "--build", str(work / "build"), "--target", "llama-server"]
        _run([*command, "-j", str(jobs)], log, build, progress)
        binary = next((work / "build").rglob("bin/llama-server"), None)
        if binary is None:
            raise EngineError("the build made no llama-server", f"see {build.log_path}")
        (build.path / "bin").mkdir(parents=True)
        shutil.copy2(binary, build.server)
    marker = BuildMarker(
        version=build.version,
        machine=platform.machine(),
        cmake_flags=list(CMAKE_FLAGS),
        build_s=round(time.monotonic() - started, 1),
        cpu_s=round(_children_cpu_s() - cpu_before, 1),
        jobs=jobs,
        binary_bytes=build.server.stat().st_size,
    )
    write_marker(build.path / MARKER, marker, indent=1)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _download(version: str, work: Path, log: TextIO) -> Path:
    command = [
        sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
        "--dest", str(work), f"{SDIST_PACKAGE}=={version}",
    ]  # fmt: skip
    done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
    found = sorted(work.glob("llama_cpp_python-*.tar.gz"))
    if done.returncode != 0 or not found:
        raise EngineError(
            f"cannot download the {SDIST_PACKAGE} {version} sdist (pip exit {done.returncode})",
            f"check the package index, or pass a downloaded sdist with --sdist; see {log.name}",
        )
    return found[0]


def _extract(sdist: Path, work: Path) -> Path:
    """Unpack only the vendored llama.cpp; its folder."""
    try:
        with tarfile.open(sdist) as archive:
            members = [m for m in archive.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
            if not members:
                raise EngineError(
                    f"{sdist} holds no vendor/llama.cpp", "give a llama-cpp-python sdist"
                )
            archive.extractall(work / "src", members=members, filter="data")
    except (OSError, tarfile.TarError) as exc:  # a TarError's text lists every method, over lines
        why = "not a tar archive" if isinstance(exc, tarfile.TarError) else str(exc)
        raise EngineError(f"cannot read {sdist}: {why}", "give a llama-cpp-python sdist") from None
    return next((work / "src").glob("*/vendor/llama.cpp"))


def _run(
    command: list[str], log: TextIO, build: LlamacppBuild, progress: Progress | None = None
) -> None:
    """Run a build step, its output to the log; a progress line every tenth of the way."""
    log.write("$ " + " ".join(command) + "\n")
    log.flush()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        told = 0
        for line in proc.stdout:
            log.write(line)
            fraction = _fraction(line)
            if progress is not None and fraction is not None and int(fraction * 10) > told:
                told = int(fraction * 10)
                progress(f"llama-server build {told * 10}% ({line.split(']')[0].strip('[ ')})")
    if proc.returncode != 0:
        raise EngineError(
            f"{command[0]} {command[1]} failed (exit {proc.returncode})", f"see {build.log_path}"
        )


def _fraction(line: str) -> float | None:
    """How far a build tool's output line says the build is (None: no counter)."""
    match = _PROGRESS_RE.match(line)
    if match is None:
        return None
    if match.group(3) is not None:
        return int(match.group(3)) / 100
    return int(match.group(1)) / max(1, int(match.group(2)))
