"""The docker image kind: an image run with the kit's env profile on the arm's GPUs."""

from __future__ import annotations

from pathlib import Path

from stallkit.engine import (
    DockerLauncher,
    DockerOptions,
    DockerSpec,
    Launcher,
    Overlay,
    free_port,
)
from stallkit.kits.arm.kinds.base import ArmKind, register
from stallkit.kits.kit import Kit

__all__ = ["DockerKind"]


@register
class DockerKind(ArmKind[DockerSpec]):
    """A docker image, run with the kit's env profile on the arm's GPUs."""

    spec_class = DockerSpec
    image = True
    target = "docker"

    def time_scale(self, kit: Kit) -> float:
        return kit.engine.time_scale

    def launcher(
        self,
        arm: str,
        spec: DockerSpec,
        kit: Kit,
        arm_dir: Path,
        log_path: Path,
        overlays: list[Overlay],
    ) -> Launcher:
        return DockerLauncher(spec, _docker_options(arm, kit, overlays), log_path)


def _docker_options(arm: str, kit: Kit, overlays: list[Overlay]) -> DockerOptions:
    host = kit.engine.host_for(arm)
    env = dict(kit.engine.env)
    if kit.engine.time_scale != 1.0:
        env["STALLKIT_TIME_SCALE"] = repr(kit.engine.time_scale)
    return DockerOptions(
        gpus=tuple(kit.engine.gpus_for(arm)),
        env=env,
        container_port=kit.engine.port,
        host_port=host.host_port or free_port(),
        shm_size=kit.engine.shm_size,
        ipc_host=kit.engine.ipc_host,
        extra_args=tuple(kit.engine.docker_args),
        engine_args=tuple(kit.engine.engine_args_for(arm)),
        overlays=tuple(overlays),
        name_prefix=f"stallkit-{kit.name}-{arm}",
        network=kit.engine.network,
        docker_host=host.docker_host,
        dcgm_url=host.dcgm_url,
    )
