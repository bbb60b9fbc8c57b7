"""A new engine kind is one module: a spec case and its kind class, each registered. Here an
`echo:` kind whose arms are the simulator under another name, defined in this file alone:
the spec parser, the forms a user is told, `kit ab --dry-run` and a run that records its kind
take it with no other edit."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, Self

import pytest
from typer.testing import CliRunner

import stallkit.engine.spec as spec_module
import stallkit.kits.arm.kinds.base as kinds_module
from stallkit.contract.meta import EngineCapabilities
from stallkit.engine import (
    BaseSpec,
    EngineCore,
    EngineError,
    Launcher,
    Overlay,
    SimConfig,
    SimEngine,
    parse_spec,
    register_spec,
    spec_forms,
    spec_usage,
)
from stallkit.engine.policy.controller import POLICIES, Policy
from stallkit.kits.arm.kinds import ArmKind, arm_specs, kind_of, register
from stallkit.kits.arm.virtual import run_virtual_arm
from stallkit.kits.cli import app
from stallkit.kits.kit import Kit, load_kit
from stallkit.reports.rundir import read_meta

SHORT = {"load.duration_s": 30.0, "load.agents": 2}


class EchoSpec(BaseSpec):
    """`echo:base` / `echo:fix`: the simulator under another name."""

    kind: Literal["echo"] = "echo"
    policy: Policy
    capabilities: EngineCapabilities = EngineCapabilities(gpu=False)

    form = "echo"
    usage = "echo:base | echo:fix"
    hint = "echo:base|fix"

    @property
    def target(self) -> str:
        return self.policy

    @classmethod
    def parse(cls, text: str, raw: str) -> Self:
        rest = text.partition(":")[2]
        policy = next((p for p in POLICIES if p == rest), None)
        if policy is None:
            raise EngineError(f"unknown echo policy {rest!r} in {raw!r}", "use echo:base|fix")
        return cls(raw=text, policy=policy)


class EchoKind(ArmKind[EchoSpec]):
    """Its launcher serves the simulator; on the virtual clock, the simulator's core."""

    spec_class = EchoSpec
    clocks = ("wall", "virtual")
    real_steps = False
    target = "sim"

    def time_scale(self, kit: Kit) -> float:
        return kit.sim.time_scale

    def launcher(
        self,
        arm: str,
        spec: EchoSpec,
        kit: Kit,
        arm_dir: Path,
        log_path: Path,
        overlays: list[Overlay],
    ) -> Launcher:
        from stallkit.engine import SimLauncher

        sim = kit.sim.engine_for(arm).model_dump(mode="json", exclude={"policy"})
        return SimLauncher(spec, arm_dir, sim, kit.sim.time_scale, log_path=log_path)

    def core(self, kit: Kit, spec: EchoSpec, arm: str, log: logging.Logger) -> EngineCore:
        cfg = kit.sim.engine_for(arm).model_copy(update={"policy": spec.policy})
        return SimEngine(SimConfig.model_validate(cfg.model_dump()), log)


@pytest.fixture
def echo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The echo kind registered for one test (the registries as they were afterwards)."""
    monkeypatch.setattr(spec_module, "_CASES", dict(spec_module._CASES))
    monkeypatch.setattr(kinds_module, "_REGISTRY", dict(kinds_module._REGISTRY))
    register_spec(EchoSpec)
    register(EchoKind)
    yield


@pytest.mark.usefixtures("echo")
def test_the_parser_and_the_forms_a_user_is_told_take_a_new_kind() -> None:
    spec = parse_spec("echo:fix")
    assert isinstance(spec, EchoSpec) and spec.policy == "fix"
    assert isinstance(kind_of(spec), EchoKind)
    assert "echo:base | echo:fix" in spec_usage()
    assert "echo:base|fix, or a docker image" in spec_forms()  # an image stays the last
    with pytest.raises(EngineError, match="unknown echo policy 'nope'"):
        parse_spec("echo:nope")
    assert parse_spec("sim:fix").kind == "sim"  # the shipped kinds as they were


def test_without_its_registration_the_form_is_unknown() -> None:
    with pytest.raises(EngineError):  # no form reads it, and no docker image is named so
        parse_spec("echo:fix")
    assert "echo" not in spec_forms() and "echo" not in spec_usage()


@pytest.mark.usefixtures("echo")
def test_kit_ab_plans_a_new_kind(tmp_path: Path) -> None:
    args = ["ab", "--base", "echo:base", "--fix", "echo:fix", "--dry-run"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "ab")])
    assert result.exit_code == 0, result.output
    assert "base: echo:base (echo; gpus -; virtual clock)" in result.output
    assert not (tmp_path / "ab").exists()  # a dry run starts nothing


@pytest.mark.usefixtures("echo")
def test_a_run_of_a_new_kind_records_its_kind(tmp_path: Path) -> None:
    kit = load_kit("restore-stall", SHORT)
    spec = arm_specs(kit, {"fix": "echo:fix"})["fix"]
    run_virtual_arm(kit, "fix", spec, tmp_path / "fix")
    meta = read_meta(tmp_path / "fix")
    assert (meta.kind, meta.spec, meta.end_reason) == ("echo", "echo:fix", "duration")
    assert meta.capabilities == EngineCapabilities(gpu=False)
