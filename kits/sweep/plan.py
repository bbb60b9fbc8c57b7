"""The plan of `kit sweep`: axes from `--vary`, their product of cells, checked against the kit.

Pure apart from reading the kit: `parse_vary` reads one `--vary KEY=VALUES` (a list `a,b,c`
or a range `start:stop:step`, both ends included), `build_plan` checks every value and every
cell against the kit's models before anything runs (a bad key or value is one `KitError`
naming the flag; a twin arm needs vLLM and sizes the twin takes), `idle_axes` notes an axis
that changes nothing in an arm, and `jobs` lists the runs a plan still needs given the runs
already recorded, in a fixed order (cell, then seed, then arm), so that a resumed sweep runs
exactly what is missing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from stallkit.contract.sweep import Setting, SweepAxis, SweepPlan, SweepRun
from stallkit.engine import EngineSpec, parse_spec
from stallkit.kits.arm.cores import arm_settings
from stallkit.kits.arm.kinds import arm_specs, check_arm_kinds, kind_of
from stallkit.kits.errors import KitError, OverrideError
from stallkit.kits.kit import Kit, load_kit

__all__ = [
    "DEFAULT_ARMS",
    "MAX_RUNS",
    "Job",
    "build_plan",
    "cell_overrides",
    "check_values",
    "idle_axes",
    "jobs",
    "parse_arms",
    "parse_vary",
    "plan_specs",
]

#: the arms a sweep runs unless --arms names others
DEFAULT_ARMS = {"base": "sim:base", "fix": "sim:fix"}
#: the most runs one sweep may plan (cells x seeds x arms)
MAX_RUNS = 1_000_000
_VARY_HINT = "use --vary KEY=A,B,C or --vary KEY=START:STOP:STEP, KEY a kit key such as sim.engine.max_num_seqs"


def _number(text: str) -> Setting:
    """A value as TOML would read it: bool, int, float, else the string itself."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text.strip()
    return value if math.isfinite(value) else text.strip()


def _range(key: str, text: str) -> list[Setting]:
    parts = text.split(":")
    try:
        start, stop, step = (Decimal(p.strip()) for p in parts)
    except (ValueError, InvalidOperation):
        raise KitError(
            f"--vary {key}={text}: a range is START:STOP:STEP in numbers", _VARY_HINT
        ) from None
    if step <= 0 or stop < start:
        raise KitError(f"--vary {key}={text}: STEP must be > 0 and STOP >= START", _VARY_HINT)
    count = int((stop - start) / step) + 1
    if count > 10_000:
        raise KitError(f"--vary {key}={text}: {count} values is too many", "use a larger STEP")
    # decimal arithmetic: 0.2:0.8:0.1 gives 0.2, 0.3, ... 0.8 exactly, not 0.30000000000000004
    values = [start + i * step for i in range(count)]
    whole = all(p.strip().lstrip("+-").isdigit() for p in parts)
    return [int(v) if whole else float(v) for v in values]


def parse_vary(text: str) -> SweepAxis:
    """One `--vary KEY=VALUES`: a comma list or an inclusive START:STOP:STEP range."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise KitError(f"--vary {text!r} is not KEY=VALUES", _VARY_HINT)
    if ":" in values:
        parsed = _range(key, values)
    else:
        parsed = [_number(v) for v in values.split(",")]
        if any(v == "" for v in parsed):
            raise KitError(f"--vary {text!r} has an empty value", _VARY_HINT)
    if len(set(map(repr, parsed))) != len(parsed):
        raise KitError(f"--vary {text!r} repeats a value", "name each value once")
    return SweepAxis(key=key, values=parsed)


def parse_arms(text: str | None) -> dict[str, str]:
    """`--arms base,fix` (names of sim policies) or `name=spec,...`; only virtual-clock arms
    (`sim:` and `twin:` specs)."""
    if text is None:
        return dict(DEFAULT_ARMS)
    arms: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        name, sep, spec = part.partition("=")
        spec = spec.strip() if sep else DEFAULT_ARMS.get(name, f"sim:{name}")
        name = name.strip()
        if not name or name in arms:
            raise KitError(f"--arms {text!r}: empty or repeated arm name", "e.g. --arms base,fix")
        parsed = parse_spec(spec)
        if "virtual" not in kind_of(parsed).clocks:
            raise KitError(
                f"--arms: {name}={spec} does not run on the virtual clock",
                "a sweep runs sim: and twin: arms, e.g. --arms base=twin:patched:base,fix=twin:patched:fix",
            )
        arms[name] = spec
    return arms


def cell_overrides(plan: SweepPlan, settings: dict[str, Setting], seed: int) -> dict[str, Any]:
    """The kit overrides of one run: the plan's fixed values, the cell's, and the seed."""
    return {**plan.fixed, **settings, "load.seed": seed}


def _check(kit_ref: str, overrides: dict[str, Any], flags: dict[str, str]) -> Kit:
    try:
        return load_kit(kit_ref, overrides)
    except OverrideError as exc:
        named = ", ".join(flags.get(k, k) for k in exc.keys)
        raise KitError(f"{named}: {exc}", exc.key_hint or _VARY_HINT) from None


def _typed(axis: SweepAxis) -> str:
    """`--vary KEY=A,B,C` as the user gave it (a range as its values)."""
    shown = ",".join(str(v).lower() if isinstance(v, bool) else str(v) for v in axis.values)
    return f"--vary {axis.key}={shown}"


def build_plan(
    kit_ref: str,
    axes: Sequence[SweepAxis],
    arms: dict[str, str],
    seeds: Sequence[int],
    duration_s: float | None,
) -> SweepPlan:
    """The plan, every value and every cell validated against the kit's models."""
    keys = [a.key for a in axes]
    if len(set(keys)) != len(keys):
        raise KitError("--vary names the same key twice", "one --vary per key")
    if not axes:
        raise KitError("nothing to sweep", "give at least one --vary KEY=VALUES")
    fixed: dict[str, Any] = {} if duration_s is None else {"load.duration_s": duration_s}
    kit = _check(kit_ref, fixed, {"load.duration_s": "--duration"})
    check_values(kit_ref, axes, fixed)
    runs = math.prod(len(a.values) for a in axes) * len(seeds) * len(arms)
    if runs > MAX_RUNS:
        raise KitError(f"the sweep plans {runs} runs, more than {MAX_RUNS}", "vary fewer values")
    plan = SweepPlan(
        kit=kit_ref,
        kit_name=kit.name,
        axes=list(axes),
        fixed=fixed,
        arms=arms,
        seeds=list(seeds),
        duration_s=float(kit.load.duration_s or 0.0),
    )
    flags = {a.key: f"--vary {a.key}" for a in axes}
    specs = arm_specs(kit, arms)
    check_arm_kinds(kit, specs)  # vLLM here, overlays, calibration: before the cells
    for cell in plan.cells():  # then the cells: values that only fail together
        cell_kit = _check(kit_ref, {**fixed, **cell}, flags)
        _check_twin_cell(cell_kit, specs, cell)
    return plan


def _check_twin_cell(kit: Kit, specs: dict[str, EngineSpec], cell: dict[str, Setting]) -> None:
    """A cell whose sizes the twin refuses (vLLM's own checks): one line naming the cell."""
    try:
        check_arm_kinds(kit, specs)
    except KitError as exc:
        where = ", ".join(f"{k}={v}" for k, v in cell.items())
        raise KitError(f"--vary {where}: {exc.message}", exc.hint) from None


def idle_axes(plan: SweepPlan) -> list[str]:
    """Each --vary that changes nothing in an arm (a simulator setting under a twin arm, a
    size the arm's engine_args set, the plugin's share under a sim arm), as a note."""
    first = {a.key: a.values[0] for a in plan.axes}
    specs = plan_specs(plan)
    notes = []
    for axis in plan.axes:
        kits = [load_kit(plan.kit, {**plan.fixed, **first, axis.key: v}) for v in axis.values]
        for name, spec in specs.items():
            if len({arm_settings(kit, spec, name) for kit in kits}) == 1:
                notes.append(
                    f"--vary {axis.key} changes nothing in arm {name} ({spec.raw}): "
                    "its cells repeat the same runs there"
                )
    return notes


def check_values(kit_ref: str, axes: Sequence[SweepAxis], fixed: dict[str, Any]) -> None:
    """Each axis's every value, alone over the kit: a KitError names the one value. A twin's
    source tree is not a setting to vary: its workers are started once, with their tree."""
    for axis in axes:
        if axis.key.startswith(("twin.overlay", "twin.arm_overlay")):
            raise KitError(
                f"--vary {axis.key}: a twin's source tree cannot vary within one sweep or hunt",
                "run one per tree (its kit's [twin] overlay, or kit ab --overlay)",
            )
        for value in axis.values:
            try:
                load_kit(kit_ref, {**fixed, axis.key: value})
            except OverrideError as exc:
                # a mistyped key fails whatever its value: the value is no part of the problem
                at = "" if exc.key_hint else f"at {value}, "
                raise KitError(
                    f"{_typed(axis)}: {at}{exc.detail}", exc.key_hint or _VARY_HINT
                ) from None


def plan_specs(plan: SweepPlan) -> dict[str, EngineSpec]:
    """The plan's arms as their runs get them: each spec parsed once, with what the plan's kit
    gives the arm (the same capabilities `kit ab` records for it)."""
    return arm_specs(load_kit(plan.kit, plan.fixed), plan.arms)


@dataclass(frozen=True)
class Job:
    """One run of a sweep: a cell on one arm (its spec as planned) with one seed."""

    cell: int
    settings: dict[str, Setting]
    arm: str
    spec: EngineSpec
    seed: int


def jobs(plan: SweepPlan, specs: dict[str, EngineSpec], done: Iterable[SweepRun] = ()) -> list[Job]:
    """The plan's runs not yet recorded, cell by cell, seed by seed, arm by arm; `specs` are
    the plan's arms as `plan_specs` gives them."""
    have = {(r.cell, r.arm, r.seed) for r in done}
    out = []
    for index, settings in enumerate(plan.cells()):
        for seed in plan.seeds:
            for arm in plan.arms:
                if (index, arm, seed) not in have:
                    out.append(Job(index, settings, arm, specs[arm], seed))
    return out
