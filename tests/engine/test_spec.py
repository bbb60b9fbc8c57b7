"""Engine specs parse once into one model per case, each with the capabilities it records."""

from __future__ import annotations

import pytest

from stallkit.contract.meta import EngineCapabilities
from stallkit.engine.spec import (
    DockerSpec,
    PatchedSpec,
    SimSpec,
    UrlSpec,
    VllmSpec,
    loads_plugin,
    parse_spec,
)
from stallkit.engine.vllm_plugin import ASYNC_PATCHED_SCHEDULER, PATCHED_SCHEDULER
from stallkit.kits.arm.kinds import arm_spec
from stallkit.kits.kit import load_kit


@pytest.mark.parametrize(
    ("raw", "case", "fields"),
    [
        ("sim:base", SimSpec, {"kind": "sim", "policy": "base"}),
        (" sim:fix ", SimSpec, {"kind": "sim", "policy": "fix", "raw": "sim:fix"}),
        (
            "vllm/vllm-openai:v0.32",
            DockerSpec,
            {"kind": "docker", "image": "vllm/vllm-openai:v0.32"},
        ),
        ("registry:5000/team/engine", DockerSpec, {"image": "registry:5000/team/engine"}),
        ("url:http://127.0.0.1:8000/", UrlSpec, {"kind": "url", "url": "http://127.0.0.1:8000"}),
        ("vllm:/models/tiny", VllmSpec, {"kind": "vllm", "model_dir": "/models/tiny"}),
        ("patched:base", PatchedSpec, {"kind": "patched", "policy": "base", "model": None}),
        ("patched:fix:/models/tiny", PatchedSpec, {"policy": "fix", "model": "/models/tiny"}),
    ],
)
def test_each_form_parses_to_its_case(raw: str, case: type, fields: dict[str, object]) -> None:
    spec = parse_spec(raw)
    assert type(spec) is case
    assert {name: getattr(spec, name) for name in fields} == fields
    assert spec.raw == raw.strip()


def test_the_target_of_older_callers_is_the_case_field() -> None:
    assert parse_spec("sim:fix").target == "fix"
    assert parse_spec("patched:base:/m").target == "base"
    assert parse_spec("reg/img:1").target == "reg/img:1"
    assert parse_spec("url:http://h:1").target == "http://h:1"
    assert parse_spec("vllm:/m").target == "/m"


def test_a_word_without_a_colon_is_no_form() -> None:
    with pytest.raises(Exception, match="unknown engine spec 'sim'"):
        parse_spec("sim")


def test_each_case_states_its_capabilities() -> None:
    caps = {raw: parse_spec(raw).capabilities for raw in ("sim:base", "url:http://h:1")}
    assert caps["sim:base"] == EngineCapabilities(gpu=False)
    assert caps["url:http://h:1"].engine_log is False
    patched = parse_spec("patched:fix").capabilities
    assert patched.step_counter and not patched.restore_admission and patched.engine_log
    image = parse_spec("reg/fork:fix").capabilities
    assert image.restore_admission and not image.step_counter and image.gpu is None


@pytest.mark.parametrize(
    "args",
    [
        ["--scheduler-cls", PATCHED_SCHEDULER],
        ["--model", "m", "--scheduler-cls", ASYNC_PATCHED_SCHEDULER, "--async-scheduling"],
        [f"--scheduler-cls={PATCHED_SCHEDULER}"],
        ["--scheduler_cls", PATCHED_SCHEDULER],
    ],
)
def test_the_plugin_is_seen_in_engine_args(args: list[str]) -> None:
    assert loads_plugin(args)


@pytest.mark.parametrize(
    "args",
    [[], ["--scheduler-cls"], ["--scheduler-cls", "vllm.v1.core.sched.scheduler.Scheduler"]],
)
def test_other_schedulers_are_not_the_plugin(args: list[str]) -> None:
    assert not loads_plugin(args)


def test_an_image_running_the_plugin_has_its_step_counter_and_no_restore_admission() -> None:
    kit = load_kit("cpu-patched-docker", {})
    spec = arm_spec("base", parse_spec("vllm/vllm-openai:v0.32"), kit)
    assert isinstance(spec, DockerSpec)
    assert spec.capabilities == EngineCapabilities(
        step_counter=True, restore_admission=False, gpu=False
    )


def test_an_image_of_the_fork_keeps_restore_admission_and_gets_the_kit_gpus() -> None:
    kit = load_kit("cpu-smoke", {"engine.gpus": [0, 1]})
    spec = arm_spec("fix", parse_spec("registry/fork:fix"), kit)
    assert spec.capabilities == EngineCapabilities(gpu=True)
    sim = arm_spec("fix", parse_spec("sim:fix"), kit)
    assert sim.capabilities.gpu is False  # the kit's GPUs are not the simulator's


def test_a_patched_arm_runs_on_the_kit_gpus() -> None:
    on_cpu = arm_spec("base", parse_spec("patched:base"), load_kit("cpu-patched", {}))
    assert on_cpu.capabilities.gpu is False
    on_gpus = arm_spec("base", parse_spec("patched:base"), load_kit("gpu-patched", {}))
    assert on_gpus.capabilities.gpu is True and on_gpus.capabilities.step_counter


@pytest.mark.parametrize(
    ("kit_name", "raw", "admits"),
    [
        ("restore-stall-twin", "twin:patched:base", True),  # the plugin over the connector
        ("restore-stall-twin", "twin:stock", False),  # vLLM's own: no restore admission
        ("restore-stall", "twin:patched:fix", False),  # no connector, no restores to admit
    ],
)
def test_a_twin_arm_has_restore_admission_only_with_the_plugin_and_a_connector(
    kit_name: str, raw: str, admits: bool
) -> None:
    spec = arm_spec("base", parse_spec(raw), load_kit(kit_name, {}))
    assert spec.capabilities.restore_admission is admits
    assert spec.capabilities.step_counter and spec.capabilities.gpu is False
