"""`url:` specs: attach to an engine that is already running; start and stop nothing."""

from __future__ import annotations

from stallkit.contract.gpu import GpuSource
from stallkit.engine.launch.base import Launcher, wait_for_health
from stallkit.engine.spec import EngineSpec

#: how long an attached engine may take to answer /health
ATTACH_TIMEOUT_S = 10.0


class AttachLauncher(Launcher):
    """An engine someone else runs. Health is checked; stop leaves it alone."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec

    def start(self) -> None:
        return None

    def wait_healthy(self, timeout_s: float) -> None:
        # the engine is supposed to be up already: do not wait a start-up timeout for it
        wait_for_health(
            self.url, min(timeout_s, ATTACH_TIMEOUT_S), lambda: None, None, self.spec.target
        )

    @property
    def url(self) -> str:
        return self.spec.target

    @property
    def gpu_source(self) -> GpuSource:
        """`auto`: which GPUs an engine someone else started uses is not known here, so the
        engine itself is asked (its DCGM page, where it serves one)."""
        return GpuSource("auto")

    def stop(self) -> None:
        return None
