"""Engine kinds as classes: what each kind of arm does, found through one registry.

The engine layer reads a spec into its case (`stallkit.engine.spec`), each case registered
with its form, parser, help line and capabilities. What an arm of that kind does with a kit
lives on one class per kind here (`ArmKind[SpecT]`, `base`), one module per kind or family:
`sim`, `twin`, `attached` (`url:`), `local` (`vllm:`, `patched:`, `llamacpp:`) and `image`
(docker). `kind_of(spec)` is the one lookup; code elsewhere asks the kind, never its name (a
test over the sources holds this). A new kind is a spec case registered with
`stallkit.engine.register_spec` and a class registered with `register`, in a module of its own.
"""

from __future__ import annotations

from stallkit.kits.arm.kinds import attached, image, local, sim, twin
from stallkit.kits.arm.kinds.base import (
    ArmKind,
    arm_spec,
    arm_specs,
    check_arm_kinds,
    kind_of,
    kinds,
    register,
)
from stallkit.kits.arm.kinds.twin import twin_config

__all__ = [
    "ArmKind",
    "arm_spec",
    "arm_specs",
    "attached",
    "check_arm_kinds",
    "image",
    "kind_of",
    "kinds",
    "local",
    "register",
    "sim",
    "twin",
    "twin_config",
]
