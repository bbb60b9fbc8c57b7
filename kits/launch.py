"""Choose and build the launcher for an arm's engine spec, and scale kit durations.

Every duration in a kit is in engine seconds. A simulated engine runs `time_scale` engine
seconds per wall second, so the durations handed to the agents and the monitor are divided
by the scale here; reports multiply back with the scale saved in each arm's meta.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.attach import AttachLauncher
from engine.docker import DockerLauncher, DockerOptions, Overlay
from engine.launcher import Launcher, free_port
from engine.spec import EngineSpec
from kits.config import Kit
from loadgen.config import LoadConfig
from monitor.config import MonitorConfig

#: load durations that stay in wall seconds whatever the engine's time scale
_WALL_ONLY = {"connect_timeout_s", "scrape_timeout_s"}
#: the monitor never scrapes more often than this (wall seconds)
MIN_INTERVAL_S = 0.05


def time_scale(spec: EngineSpec, kit: Kit) -> float:
    """Engine seconds per wall second for an arm: the kit's for the simulator and for images
    (1 unless a simulator image runs faster), else 1."""
    if spec.kind == "sim":
        return kit.sim.time_scale
    return kit.engine.time_scale if spec.kind == "docker" else 1.0


def _scaled(fields: dict[str, Any], scale: float) -> dict[str, Any]:
    out = dict(fields)
    for key, value in fields.items():
        if key.endswith("_s") and key not in _WALL_ONLY and isinstance(value, int | float):
            out[key] = value / scale
    return out


def load_config(kit: Kit, scale: float) -> LoadConfig:
    """The kit's load in wall seconds for an engine at `scale`."""
    return LoadConfig.model_validate(_scaled(kit.load.model_dump(), scale))


def monitor_config(kit: Kit, scale: float) -> MonitorConfig:
    """The kit's monitor settings in wall seconds for an engine at `scale`."""
    fields = _scaled(kit.monitor.model_dump(exclude={"gpu_source"}), scale)
    fields["interval_s"] = max(MIN_INTERVAL_S, fields["interval_s"])
    return MonitorConfig.model_validate(fields)


def make_launcher(
    arm: str, spec: EngineSpec, kit: Kit, arm_dir: Path, overlays: list[Overlay] | None = None
) -> Launcher:
    """The launcher for one arm; logs go to `arm_dir/engine.log`."""
    log_path = arm_dir / "engine.log"
    if spec.kind == "sim":
        from engine.simproc import SimLauncher

        sim = kit.sim.engine.model_dump(mode="json", exclude={"policy"})
        return SimLauncher(spec, arm_dir, sim, kit.sim.time_scale, log_path=log_path)
    if spec.kind == "url":
        source = kit.monitor.gpu_source
        return AttachLauncher(spec, gpu_source="none" if source == "auto" else source)
    if spec.kind == "vllm":
        from engine.local import VllmLauncher

        return VllmLauncher(spec, arm_dir, engine_args=kit.engine.engine_args, log_path=log_path)
    if spec.kind == "patched":
        return _patched_launcher(arm, spec, kit, arm_dir, log_path)
    host = kit.engine.host_for(arm)
    env = dict(kit.engine.env)
    if kit.engine.time_scale != 1.0:
        env["STALLKIT_TIME_SCALE"] = repr(kit.engine.time_scale)
    opts = DockerOptions(
        gpus=tuple(kit.engine.gpus_for(arm)),
        env=env,
        container_port=kit.engine.port,
        host_port=host.host_port or free_port(),
        shm_size=kit.engine.shm_size,
        ipc_host=kit.engine.ipc_host,
        extra_args=tuple(kit.engine.docker_args),
        engine_args=tuple(kit.engine.engine_args_for(arm)),
        overlays=tuple(overlays or ()),
        name_prefix=f"stallkit-{kit.name}-{arm}",
        network=kit.engine.network,
        docker_host=host.docker_host,
        dcgm_url=host.dcgm_url,
    )
    return DockerLauncher(spec, opts, log_path)


def _patched_launcher(
    arm: str, spec: EngineSpec, kit: Kit, arm_dir: Path, log_path: Path
) -> Launcher:
    """A local vLLM with the patched scheduler: the kit's model, share and engine arguments."""
    from engine.patched.config import PatchedConfig
    from engine.patched.launch import PatchedLauncher, PatchedOptions, resolve_model

    gpus = kit.engine.gpus_for(arm)
    section = kit.patched
    asynchronous = bool(gpus) if section.async_scheduling is None else section.async_scheduling
    config = PatchedConfig(spec.target, section.prefill_compute_share)  # type: ignore[arg-type]
    return PatchedLauncher(
        spec,
        arm_dir,
        resolve_model(spec, section.model),
        PatchedOptions(config, asynchronous),
        engine_args=kit.engine.engine_args,
        gpus=gpus,
        log_path=log_path,
        extra_env=kit.engine.env,
    )
