"""Build the engine image offline: a Debian root file system, this Python, the engine package.

No registry is needed: `debootstrap --variant=minbase` builds the root file system from the
Debian mirror apt already uses (cached as a tarball, built once), and one tar stream of it
plus this interpreter (same path as here), the distributions the simulator imports and the
engine package goes to `docker import`. Base and fix images come from the one recipe; only
`engine/image/baked.py` inside them differs.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from stallkit.engine.errors import EngineError
from stallkit.engine.image.entrypoint import ENGINES
from stallkit.engine.policy.controller import POLICIES

#: where the engine package and its distributions live in the image (PYTHONPATH); the same
#: place the patched engine expects its package in a stock vLLM image
IMAGE_LIB = "/opt/stallkit"
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: shared libraries a CPython and its extension modules need, beyond minbase
PACKAGES = (
    "libssl3",
    "libffi8",
    "libsqlite3-0",
    "libreadline8",
    "libncursesw6",
    "libexpat1",
    "libnsl2",
    "libtirpc3",
    "libuuid1",
    "zlib1g",
    "libbz2-1.0",
    "liblzma5",
    "ca-certificates",
)
#: standard-library parts an engine never imports
_STDLIB_SKIP = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3"}
#: modules whose imports decide which distributions go into the image
_ROOT_MODULES = (
    "stallkit.engine.image.entrypoint",
    "stallkit.engine.launch.sim",
    "stallkit.engine.serve.server",
    "stallkit.engine.serve.__main__",
)


@dataclass(frozen=True)
class ImageRecipe:
    """One engine image: its tag, what it runs, and where the root file system is cached."""

    tag: str
    policy: str = "base"
    engine: str = "sim"
    cache_dir: Path = Path.home() / ".cache" / "stallkit" / "image"
    mirror: str | None = None
    docker_host: str | None = None


def apt_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt is configured with (for `SUITE`), else deb.debian.org."""
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for stanza in re.split(r"\n\s*\n", text):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            if uris and suites and SUITE in suites.group(1).split():
                return uris.group(1).rstrip("/")
        for match in re.finditer(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", text, re.M):
            if match.group(2) == SUITE:
                return match.group(1).rstrip("/")
    return DEFAULT_MIRROR


def rootfs_tarball(recipe: ImageRecipe) -> Path:
    """The cached minbase root file system tarball, built with debootstrap when missing."""
    tarball = recipe.cache_dir / f"rootfs-{SUITE}.tar"
    if tarball.is_file():
        return tarball
    if shutil.which("debootstrap") is None:
        raise EngineError("debootstrap is not installed", "apt-get install -y debootstrap")
    if os.geteuid() != 0:
        raise EngineError("building the root file system needs root", "run as root (sudo)")
    recipe.cache_dir.mkdir(parents=True, exist_ok=True)
    mirror = recipe.mirror or apt_mirror()
    with tempfile.TemporaryDirectory(dir=recipe.cache_dir, prefix="rootfs-") as tmp:
        root = Path(tmp) / "root"
        log = recipe.cache_dir / "debootstrap.log"
        argv = ["debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES)]
        argv += [SUITE, str(root), mirror]
        with log.open("wb") as out:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            tail = log.read_text("utf-8", "replace").strip().splitlines()[-3:]
            raise EngineError(
                f"debootstrap from {mirror} failed: {' / '.join(tail)}",
                f"check the mirror (--mirror) and {log}",
            )
        # the partial tarball lives in this build's own folder: two builds at once (two test
        # workers, two CI jobs sharing a cache) each write their own, and the rename is atomic
        partial = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True)
        os.replace(partial, tarball)
    return tarball


def stage_package(dest: Path, policy: str, engine: str = "sim") -> Path:
    """Write the engine package as an image carries it (baked policy) to `dest/engine`
    (`stallkit.engine` where `dest` is the image's `stallkit/`)."""
    if policy not in POLICIES or engine not in ENGINES:
        raise EngineError(f"cannot bake policy {policy!r} / engine {engine!r}", "base|fix, sim")
    source = _SRC / "engine"
    target = dest / "engine"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    baked = target / "image" / "baked.py"
    text = baked.read_text(encoding="utf-8")
    text = re.sub(r'^POLICY = ".*"$', f'POLICY = "{policy}"', text, flags=re.M)
    text = re.sub(r'^ENGINE = ".*"$', f'ENGINE = "{engine}"', text, flags=re.M)
    baked.write_text(text, encoding="utf-8")
    return target


#: the folder holding the role packages (`engine/`, `contract/`, ...): a checkout's root, or
#: the installed `stallkit/` package
_SRC = Path(__file__).resolve().parents[2]
#: where the image keeps the `stallkit` package (IMAGE_LIB is on its PYTHONPATH)
IMAGE_PACKAGE = f"{IMAGE_LIB}/stallkit"


def _package_init() -> Path:
    """The `stallkit` package's own `__init__.py` (a checkout's `stallkit/`, or the wheel's)."""
    return Path(str(importlib.import_module("stallkit").__file__))


@functools.lru_cache(maxsize=1)
def _imported_top_levels() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Top-level modules the simulator and the entrypoint import, and the project's role
    packages among them (`stallkit.ROLE`), asked of a fresh interpreter."""
    probe = (
        "import importlib, json, sys\n"
        f"for m in {list(_ROOT_MODULES)!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted({n.split('.')[0] for n in sys.modules})))\n"
        "print(json.dumps(sorted({n.split('.')[1] for n in sys.modules "
        "if n.startswith('stallkit.')})))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(_package_init().parent.parent)}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        raise EngineError("cannot import the simulator to size the image", out.stderr[-300:])
    tops, roles = out.stdout.splitlines()[-2:]
    return tuple(json.loads(tops)), tuple(json.loads(roles))


def runtime_distributions() -> list[str]:
    """Installed distributions the simulator and the entrypoint need, with their requirements."""
    owners = metadata.packages_distributions()
    names = {d for top in _imported_top_levels()[0] for d in owners.get(top, [])}
    return sorted(_with_requirements(names - {"stallkit", "setuptools"}))


def sibling_packages() -> list[Path]:
    """This project's other packages the engine imports (shared models), copied as they are."""
    roles = _imported_top_levels()[1]
    return [
        _SRC / role
        for role in roles
        if role != "engine" and (_SRC / role / "__init__.py").is_file()
    ]


def _with_requirements(names: set[str]) -> set[str]:
    """`names` and what they require (no extras), as far as it is installed here."""
    todo, seen = sorted(names), set[str]()
    while todo:
        name = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        for req in dist.requires or []:
            if "extra ==" in req:
                continue
            match = re.match(r"[A-Za-z0-9._-]+", req)
            if match:
                todo.append(match.group(0))
    return seen


def _distribution_files(name: str) -> Iterator[tuple[Path, str]]:
    dist = metadata.distribution(name)
    base = Path(str(dist.locate_file(""))).resolve()
    for entry in dist.files or []:
        path = Path(str(dist.locate_file(entry))).resolve()
        if path.is_file() and path.is_relative_to(base) and "__pycache__" not in path.parts:
            yield path, f"{IMAGE_LIB}/{path.relative_to(base)}"


def _python_files() -> Iterator[tuple[Path, str]]:
    prefix = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    yield (
        Path(getattr(sys, "_base_executable", sys.executable)).resolve(),
        f"{prefix}/bin/{version}",
    )
    libdir = Path(sysconfig.get_config_var("LIBDIR") or prefix / "lib")
    for lib in sorted(libdir.glob("libpython*.so*")):
        yield lib, str(lib)
    stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix})["stdlib"])
    for path in sorted(stdlib.rglob("*")):
        rel = path.relative_to(stdlib)
        if rel.parts[0] in _STDLIB_SKIP or rel.parts[0].startswith("config-"):
            continue
        if path.is_file() and not path.is_symlink():
            yield path, str(path)


def _import_argv(recipe: ImageRecipe) -> list[str]:
    python = f"{sys.base_prefix}/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    entry = json.dumps([python, "-m", "stallkit.engine.image.entrypoint"])
    changes = [
        f"ENTRYPOINT {entry}",
        f"ENV PYTHONPATH={IMAGE_LIB}",
        "ENV PYTHONUNBUFFERED=1",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        f"LABEL stallkit.policy={recipe.policy}",
        f"LABEL stallkit.engine={recipe.engine}",
        "WORKDIR /",
    ]
    argv = ["docker", *(["--host", recipe.docker_host] if recipe.docker_host else []), "import"]
    for change in changes:
        argv += ["--change", change]
    return [*argv, "-", recipe.tag]


def _stream(tar: tarfile.TarFile, rootfs: Path, files: Mapping[str, Path]) -> None:
    with tarfile.open(rootfs, "r:") as base:
        for member in base:
            handle = base.extractfile(member) if member.isfile() else None
            tar.addfile(member, handle)
    for arcname, path in files.items():
        info = tar.gettarinfo(str(path), arcname=arcname.lstrip("/"))
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        with path.open("rb") as fh:
            tar.addfile(info, fh)


def build_image(recipe: ImageRecipe) -> float:
    """Build and import the image; returns the seconds it took."""
    started = time.monotonic()
    _check_daemon(recipe.docker_host)
    rootfs = rootfs_tarball(recipe)
    files: dict[str, Path] = {}
    for path, arcname in _python_files():
        files[arcname] = path
    for name in runtime_distributions():
        for path, arcname in _distribution_files(name):
            files[arcname] = path
    files[f"{IMAGE_PACKAGE}/__init__.py"] = _package_init()
    for package_dir in sibling_packages():
        for path in sorted(package_dir.rglob("*.py")):
            files[f"{IMAGE_PACKAGE}/{path.relative_to(_SRC)}"] = path
    with tempfile.TemporaryDirectory(prefix="stallkit-image-") as tmp:
        package = stage_package(Path(tmp), recipe.policy, recipe.engine)
        for path in sorted(package.rglob("*")):
            if path.is_file():
                files[f"{IMAGE_PACKAGE}/{path.relative_to(tmp)}"] = path
        _docker_import(recipe, rootfs, files)
    return time.monotonic() - started


def _check_daemon(docker_host: str | None) -> None:
    """Fail fast, before the slow root file system, when no docker daemon answers."""
    argv = ["docker", *(["--host", docker_host] if docker_host else []), "version"]
    try:
        done = subprocess.run(
            [*argv, "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except FileNotFoundError:
        raise EngineError("the docker CLI is not installed", "install docker.io") from None
    except subprocess.TimeoutExpired:
        raise EngineError("the docker daemon did not answer in 30 s", "is dockerd up?") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        where = docker_host or os.environ.get("DOCKER_HOST", "the default socket")
        raise EngineError(
            f"no docker daemon answers at {where}: {last}",
            "start dockerd, or name its socket with --docker-host",
        )


def _docker_import(
    recipe: ImageRecipe, rootfs: Path, files: Mapping[str, Path], argv: list[str] | None = None
) -> None:
    """Stream the root file system and `files` into `docker import` (`argv`: the recipe's)."""
    argv = argv or _import_argv(recipe)
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err
            )
        except FileNotFoundError:
            raise EngineError("the docker CLI is not installed", "install docker.io") from None
        assert proc.stdin is not None
        try:
            with tarfile.open(fileobj=proc.stdin, mode="w|") as tar:
                _stream(tar, rootfs, files)
        except BrokenPipeError:
            pass  # docker gave up; its message says why
        finally:
            proc.stdin.close()
        code = proc.wait(timeout=600)
        err.seek(0)
        lines = err.read().decode("utf-8", "replace").strip().splitlines()
    if code != 0:
        raise EngineError(
            f"docker import failed: {(lines or ['no output'])[-1]}", "is the docker daemon up?"
        )
