"""The kinds of a local engine this machine starts: `vllm:`, `patched:` and `llamacpp:`."""

from __future__ import annotations

from pathlib import Path

from stallkit.engine import (
    Launcher,
    LlamacppSpec,
    Overlay,
    PatchedSpec,
    VllmSpec,
    check_local_vllm,
    resolve_model,
)
from stallkit.kits.arm.kinds.base import ArmKind, register
from stallkit.kits.kit import Kit

__all__ = ["LlamacppKind", "PatchedKind", "VllmKind"]


@register
class VllmKind(ArmKind[VllmSpec]):
    """`vllm:MODEL_DIR`: a local `vllm serve`."""

    spec_class = VllmSpec
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


@register
class LlamacppKind(ArmKind[LlamacppSpec]):
    """`llamacpp:MODEL.gguf`: llama.cpp's server on this CPU, one slot per agent of the load."""

    spec_class = LlamacppSpec
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


@register
class PatchedKind(ArmKind[PatchedSpec]):
    """`patched:base|fix[:MODEL_DIR]`: a local vLLM running the scheduler plugin."""

    spec_class = PatchedSpec
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
