"""Start the patched engine: a local vLLM whose scheduler is the plugin, or its docker arguments.

A `patched:base` / `patched:fix` arm is a `vllm:MODEL_DIR` server with four additions: the
directory holding the `stallkit` package on `PYTHONPATH` (vLLM's engine-core process resolves
`--scheduler-cls` by qualified name), `--scheduler-cls` and `--additional-config` with the
policy and prefill share, `PROMETHEUS_MULTIPROC_DIR` set to a fresh directory in the run
directory (so the scheduler's metrics, made in the engine-core process, reach `/metrics`),
and on GPUs the arm's GPU list and async scheduling. `docker_engine_args` gives the same for
a stock vLLM image, with the plugin bind-mounted through `--overlay`.
"""

from __future__ import annotations

import importlib
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stallkit.engine.errors import EngineError
from stallkit.engine.launch.base import engine_api_key, serve_first_request
from stallkit.engine.launch.vllm import VllmLauncher
from stallkit.engine.spec import EngineSpec, PatchedSpec, VllmSpec
from stallkit.engine.vllm_plugin import ASYNC_PATCHED_SCHEDULER, PATCHED_SCHEDULER
from stallkit.engine.vllm_plugin.config import PatchedConfig

#: the directory holding the `stallkit` package, whose `engine` holds the plugin (put on the
#: engine's PYTHONPATH): site-packages once installed, the checkout's root in a source tree
PLUGIN_ROOT = Path(str(importlib.import_module("stallkit").__file__)).parent.parent
#: where `docker_engine_args` expects the `stallkit` package (the plugin's) inside an image
CONTAINER_ROOT = "/opt/stallkit"
CONTAINER_METRICS_DIR = "/tmp/stallkit-prometheus"


@dataclass(frozen=True)
class PatchedOptions:
    """What a patched arm runs: the plugin's settings and how vLLM schedules."""

    config: PatchedConfig
    async_scheduling: bool = False

    @property
    def scheduler_cls(self) -> str:
        """The qualified class name for `--scheduler-cls`."""
        return ASYNC_PATCHED_SCHEDULER if self.async_scheduling else PATCHED_SCHEDULER

    def engine_args(self) -> list[str]:
        """The vLLM arguments that load and configure the plugin."""
        args = ["--scheduler-cls", self.scheduler_cls]
        args += ["--additional-config", self.config.to_additional_config()]
        args.append("--async-scheduling" if self.async_scheduling else "--no-async-scheduling")
        return args


def resolve_model(spec: PatchedSpec, kit_model: str | None) -> str:
    """The model a patched arm serves: the spec's, else the kit's with ${VAR} expanded."""
    model = spec.model or kit_model
    if not model:
        raise EngineError(
            f"{spec.raw} names no model and the kit sets no patched.model",
            f"write {spec.raw}:MODEL_DIR, or set [patched] model in the kit",
        )
    expanded = os.path.expandvars(model)
    if "$" in expanded:
        raise EngineError(
            f"the kit's patched.model {model!r} names an unset environment variable",
            "export it (for the tiny model: kit engine tiny-model DIR; "
            "export STALLKIT_TINY_MODEL=DIR), or write patched:POLICY:MODEL_DIR",
        )
    return expanded


def _pythonpath(base: str | None) -> str:
    parts = [str(PLUGIN_ROOT), *(base.split(os.pathsep) if base else [])]
    return os.pathsep.join(dict.fromkeys(p for p in parts if p))


class PatchedLauncher(VllmLauncher):
    """A local vLLM server running the patched scheduler (`patched:base` / `patched:fix`)."""

    def __init__(
        self,
        spec: EngineSpec,
        work_dir: Path,
        model: str,
        options: PatchedOptions,
        engine_args: Sequence[str] = (),
        gpus: Sequence[int] = (),
        log_path: Path | None = None,
        grace_s: float = 15.0,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        if spec.kind != "patched":
            raise EngineError(
                f"{spec.raw} is not a patched: spec", "write patched:base or patched:fix"
            )
        served = VllmSpec(raw=spec.raw, model_dir=model)
        args = [*options.engine_args(), *engine_args]
        super().__init__(served, work_dir, args, log_path=log_path, grace_s=grace_s)
        self.spec = spec
        self.options = options
        self.metrics_dir = Path(work_dir).resolve() / "prometheus"
        env = dict(self.env or os.environ)
        env.update(extra_env or {})
        env["PYTHONPATH"] = _pythonpath(env.get("PYTHONPATH"))
        env["PROMETHEUS_MULTIPROC_DIR"] = str(self.metrics_dir)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
        self.env = env

    def start(self) -> None:
        if self.process is None:
            # multiprocess metric files of an earlier run would add to this one's counters
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
            self.metrics_dir.mkdir(parents=True)
        super().start()

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        super().wait_healthy(timeout_s)
        # the warm-up shares the start-up limit: health and it together take at most timeout_s
        left_s = max(deadline - time.monotonic(), 1.0)
        key = engine_api_key(self.argv, self.env)
        serve_first_request(self.url, left_s, self.spec.raw, self.log_path, key)


def docker_engine_args(options: PatchedOptions) -> tuple[list[str], dict[str, str]]:
    """Engine arguments and environment that run the plugin inside a stock vLLM image.

    The image must see this tree's `engine/` and `contract/` packages (the plugin imports the
    shared metric names from `contract`) under `CONTAINER_ROOT`: pass `--overlay
    SRC/engine:/opt/stallkit/stallkit/engine --overlay SRC/contract:/opt/stallkit/stallkit/contract`
    (SRC: the checkout; `stallkit` is then a namespace package of the two). The metrics directory is a fresh path inside the container.
    """
    env = {"PYTHONPATH": CONTAINER_ROOT, "PROMETHEUS_MULTIPROC_DIR": CONTAINER_METRICS_DIR}
    return options.engine_args(), env
