"""The engine core of a virtual-clock arm, from its spec and the kit: the simulator or the twin.

`sim:` arms get the simulator's core with the kit's `[sim.engine]` settings; `twin:` arms get
vLLM's own scheduler class (`twin_config` resolves which, over what pool, at what step cost).
The twin's sizes are the vLLM flags of the arm's `engine_args` over the simulator's sizes, its
patched policies take the kit's `[patched] prefill_compute_share`, its cost the kit's
`[twin] calibration`. Building a twin core imports vLLM, so it happens in the arm's worker.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import ValidationError

from stallkit.contract.errors import validation_message
from stallkit.engine import (
    OVERLAY_PACKAGES,
    VLLM_MISSING,
    EngineCore,
    EngineError,
    EngineSpec,
    check_no_fault,
    check_release,
    vllm_importable,
)
from stallkit.kits.arm.kinds import kind_of, twin_config
from stallkit.kits.errors import KitError
from stallkit.kits.kit import Kit

__all__ = ["arm_settings", "check_twin_arms", "twin_config", "virtual_core"]


def arm_settings(kit: Kit, spec: EngineSpec, arm: str) -> str:
    """Everything an arm's run depends on, as one string: two kits giving the same string
    give the arm the same run (`kit sweep` notes a --vary that changes nothing in an arm)."""
    core = kind_of(spec).core_settings(kit, spec, arm)
    used = {"core": core, "load": kit.load.model_dump(mode="json")}
    return json.dumps(used | {"monitor": kit.monitor.model_dump(mode="json")}, sort_keys=True)


def virtual_core(kit: Kit, spec: EngineSpec, arm: str, log: logging.Logger) -> EngineCore:
    """The in-process engine core of a virtual-clock arm (`sim:` or `twin:`)."""
    return kind_of(spec).core(kit, spec, arm, log)


def check_twin_arms(kit: Kit, specs: dict[str, EngineSpec]) -> None:
    """A twin arm needs vLLM here (or, on `twin@RELEASE`, that release built here or on the
    package index), its overlays and its calibration: refuse before anything runs (the worker
    would find out only after importing vLLM)."""
    twins = {name: spec for name, spec in specs.items() if kind_of(spec).vllm_in_process}
    if not twins:
        return
    try:
        check_no_fault(f"{', '.join(twins)}: twin arms", kit.sim.engine.fault, "[sim.engine] fault")
    except EngineError as exc:
        raise KitError(exc.message, exc.hint) from None
    here = [name for name, spec in twins.items() if kind_of(spec).vllm_release(spec) is None]
    if here and not vllm_importable():
        raise KitError(
            f"{', '.join(here)}: twin arms need vLLM, which is not installed", VLLM_MISSING
        )
    _check_releases(twins)
    strays = sorted(set(kit.twin.arm_overlay) - set(twins))
    if strays:
        raise KitError(
            f"[twin] arm_overlay names {', '.join(strays)}, which is no twin arm here",
            f"twin arms: {', '.join(twins)}",
        )
    for name, spec in twins.items():
        tree = kit.twin.overlay_for(name)
        if tree is not None and not any(
            (Path(tree).expanduser() / package).is_dir() for package in OVERLAY_PACKAGES
        ):
            raise KitError(
                f"{name}: overlay {tree} holds no vllm/ or lmcache/ directory",
                "point it at a tree holding vllm/... (a fork's checkout, or its changed files)",
            )
        try:
            kind_of(spec).core_settings(kit, spec, name)
        except EngineError as exc:
            raise KitError(f"{name}: [twin] calibration: {exc}", exc.hint) from None
        except ValidationError as exc:
            raise KitError(
                f"{name}: the twin's settings: {validation_message(exc)}",
                "check the kit's [twin], [patched] and vLLM size flags",
            ) from None


def _check_releases(twins: dict[str, EngineSpec]) -> None:
    """Each `twin@RELEASE` arm's release is built here or on the package index (asked once)."""
    releases = {kind_of(spec).vllm_release(spec): name for name, spec in twins.items()}
    for release, name in releases.items():
        if release is None:
            continue
        try:
            check_release(release)
        except EngineError as exc:
            raise KitError(f"{name}: {exc.message}", exc.hint) from None
