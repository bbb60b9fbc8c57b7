"""`url:` specs: attach to an engine that is already running; start and stop nothing."""

from __future__ import annotations

from stallkit.contract.gpu import GpuSource
from stallkit.engine.launch.base import Launcher, wait_for_health
from stallkit.engine.spec import EngineSpec

#: how long an attached engine may take to answer /health
ATTACH_TIMEOUT_S = 10.0


class AttachLauncher(Launcher):
    """An engine someone else runs. Health is checked; stop leaves it alone."""

    def __init__(self, spec: EngineSpec, gpu_source: GpuSource | None = None) -> None:
        self.spec = spec
        self._gpu_source = gpu_source or GpuSource("none")

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
        return self._gpu_source

    def stop(self) -> None:
        return None
