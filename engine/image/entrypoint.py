"""The engine image's entrypoint: the fork's launch profile in, the engine's command line out.

The fork's images take their sizes and policy from the environment (the kit's
`[engine.env]`): PROFILE, PORT, TP, DCP, MAX_NUM_SEQS, KV_CACHE_MEMORY_BYTES,
PREFILL_COMPUTE_SHARE, CACHE_MODE and the LMCACHE_* settings. `engine_command` maps them,
purely, onto the simulator's config or onto a `vllm serve` with the patched scheduler;
`main` writes the simulator's config and replaces itself with the engine. A bad value exits
with one line and code 2, before anything starts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stallkit.engine.policy.controller import POLICIES

#: KV bytes the simulator counts per block of `block_size` tokens: the restore-stall kit's
#: 3.8 GB pool is then the simulator's 319-block pool (override: SIM_KV_BYTES_PER_BLOCK)
KV_BYTES_PER_BLOCK = 11_900_000
LMCACHE_CONNECTOR = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'
SIM_CONFIG_PATH = Path("/tmp/stallkit-sim-config.toml")
ENGINES = ("sim", "patched")


class ProfileError(ValueError):
    """A launch-profile value the engine cannot take (one line for the container's log)."""


@dataclass(frozen=True)
class EngineCommand:
    """What the container runs: an argument list, and for the simulator its config."""

    argv: list[str]
    sim_config: dict[str, Any] = field(default_factory=dict)


def _int(env: Mapping[str, str], key: str, default: int, minimum: int = 1) -> int:
    text = env.get(key, "").strip()
    if not text:
        return default
    try:
        value = int(float(text)) if "e" in text.lower() else int(text)
    except ValueError:
        raise ProfileError(f"{key}={text!r} is not a whole number") from None
    if value < minimum:
        raise ProfileError(f"{key}={value} must be at least {minimum}")
    return value


def _float(env: Mapping[str, str], key: str, default: float) -> float:
    text = env.get(key, "").strip()
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise ProfileError(f"{key}={text!r} is not a number") from None


def _flag(env: Mapping[str, str], key: str, default: bool) -> bool:
    text = env.get(key, "").strip().lower()
    if not text:
        return default
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ProfileError(f"{key}={env[key]!r} is not true or false")


def _lmcache(env: Mapping[str, str]) -> bool:
    mode = env.get("CACHE_MODE", "").strip().lower()
    if mode in ("", "gpu", "none", "prefix"):
        return False
    if mode != "lmcache":
        raise ProfileError(f"CACHE_MODE={mode!r} is not one of gpu, none, lmcache")
    lm_mode = env.get("LMCACHE_MODE", "on_evict").strip().lower()
    if lm_mode != "on_evict":
        raise ProfileError(f"LMCACHE_MODE={lm_mode!r}: only on_evict is supported")
    return _flag(env, "LMCACHE_LOCAL_CPU", True)


def sim_config(env: Mapping[str, str], policy: str) -> dict[str, Any]:
    """The simulator's config fields for a launch profile (sizes, policy, host tier)."""
    per_block = _int(env, "SIM_KV_BYTES_PER_BLOCK", KV_BYTES_PER_BLOCK)
    config: dict[str, Any] = {
        "policy": policy,
        "max_num_seqs": _int(env, "MAX_NUM_SEQS", 4),
        "num_gpus": _int(env, "TP", 1),
        "prefill_compute_share": _float(env, "PREFILL_COMPUTE_SHARE", 0.0),
        "restore_max_wait_s": _float(env, "LMCACHE_RESTORE_MAX_WAIT_S", 60.0),
    }
    if env.get("KV_CACHE_MEMORY_BYTES", "").strip():
        config["num_blocks"] = max(1, _int(env, "KV_CACHE_MEMORY_BYTES", 0) // per_block)
    if _lmcache(env):
        cpu_gb = _float(env, "LMCACHE_MAX_LOCAL_CPU_SIZE", 5.0)
        config["host_tier_blocks"] = max(1, int(cpu_gb * 1e9) // per_block)
    else:
        config["host_tier_blocks"] = 0
    if env.get("SERVED_MODEL_NAME", "").strip():
        config["model_name"] = env["SERVED_MODEL_NAME"].strip()
    return config


def _patched_argv(env: Mapping[str, str], policy: str, python: str, host: str) -> list[str]:
    from stallkit.engine.launch.patched import PatchedOptions
    from stallkit.engine.vllm_plugin.config import DEFAULT_PREFILL_SHARE, PatchedConfig

    model = env.get("MODEL", "").strip()
    if not model:
        raise ProfileError("MODEL is not set: the patched engine needs a model directory")
    share = _float(env, "PREFILL_COMPUTE_SHARE", DEFAULT_PREFILL_SHARE)
    argv = [python, "-m", "vllm.entrypoints.cli.main", "serve", model]
    argv += ["--host", host, "--port", str(_int(env, "PORT", 8000))]
    argv += ["--tensor-parallel-size", str(_int(env, "TP", 1))]
    dcp = _int(env, "DCP", 1)
    if dcp > 1:
        argv += ["--decode-context-parallel-size", str(dcp)]
    argv += ["--max-num-seqs", str(_int(env, "MAX_NUM_SEQS", 4))]
    if env.get("KV_CACHE_MEMORY_BYTES", "").strip():
        argv += ["--kv-cache-memory-bytes", str(_int(env, "KV_CACHE_MEMORY_BYTES", 0))]
    # the plugin's own arguments: --scheduler-cls and its --additional-config
    argv += PatchedOptions(PatchedConfig(policy, share)).engine_args()  # type: ignore[arg-type]
    if _lmcache(env):
        # LMCache reads its own LMCACHE_* variables from the environment
        argv += ["--kv-transfer-config", LMCACHE_CONNECTOR]
    if env.get("SERVED_MODEL_NAME", "").strip():
        argv += ["--served-model-name", env["SERVED_MODEL_NAME"].strip()]
    return argv


def engine_command(
    env: Mapping[str, str],
    policy: str,
    engine: str,
    python: str = "python3",
    extra_args: Sequence[str] = (),
) -> EngineCommand:
    """The command an image built as (`policy`, `engine`) runs under the environment `env`."""
    if policy not in POLICIES:
        raise ProfileError(f"policy {policy!r} is not base or fix")
    engine = env.get("STALLKIT_ENGINE", "").strip() or engine
    if engine not in ENGINES:
        raise ProfileError(f"STALLKIT_ENGINE={engine!r} is not sim or patched")
    host = env.get("HOST", "").strip() or "0.0.0.0"
    if engine == "patched":
        return EngineCommand(_patched_argv(env, policy, python, host) + list(extra_args))
    argv = [
        python,
        "-m",
        "stallkit.engine.serve",
        "--host",
        host,
        "--port",
        str(_int(env, "PORT", 8000)),
    ]
    argv += ["--time-scale", repr(_float(env, "STALLKIT_TIME_SCALE", 1.0))]
    argv += ["--config", str(SIM_CONFIG_PATH), *extra_args]
    return EngineCommand(argv, sim_config(env, policy))


def main(argv: Sequence[str] | None = None) -> int:
    """Start the engine the image was built for, with the environment's launch profile."""
    from stallkit.engine.image import baked
    from stallkit.engine.launch.sim import dump_toml

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        command = engine_command(os.environ, baked.POLICY, baked.ENGINE, sys.executable, args)
    except ProfileError as exc:
        print(f"stallkit-image: error: {exc}", file=sys.stderr, flush=True)
        return 2
    profile = os.environ.get("PROFILE", "(none)")
    print(
        f"stallkit-image: profile {profile}, policy {baked.POLICY}, engine {baked.ENGINE}",
        file=sys.stderr,
        flush=True,
    )
    if command.sim_config:
        SIM_CONFIG_PATH.write_text(dump_toml(command.sim_config), encoding="utf-8")
    os.execv(command.argv[0], command.argv)
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
