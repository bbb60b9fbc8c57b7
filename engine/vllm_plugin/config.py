"""The patched scheduler's settings, read from vLLM's `--additional-config` JSON, and its version guard.

The settings live under one key, `patched_scheduler`:

    --additional-config '{"patched_scheduler": {"policy": "fix", "prefill_compute_share": 0.9}}'

`policy` (`base` or `fix`) is required; `prefill_compute_share` is a number in (0, 1) and
defaults to the fork's 0.4; `restore_max_wait_s` (default 60, as the fork's) is how long a
restore from a KV connector's host tier waits for capacity before its prompt is recomputed;
`allow_untested_vllm` (default false) lets the plugin load on a
vLLM release other than the ones it was tested with (as does the environment variable
`STALLKIT_ALLOW_UNTESTED_VLLM=1`). Anything else is an error: a bad value fails the engine
start instead of running with a silent default. Standard library only, so that the vLLM
engine-core process imports nothing of the tool beyond this package and the controller.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from stallkit.engine.policy.controller import POLICIES, Policy

CONFIG_KEY = "patched_scheduler"
#: vLLM releases the plugin's hooks were checked against (schedule(), the preemption check)
TESTED_VLLM_VERSIONS = ("0.30.0", "0.31.0", "0.32.0")
ALLOW_UNTESTED_ENV = "STALLKIT_ALLOW_UNTESTED_VLLM"
DEFAULT_PREFILL_SHARE = 0.4
DEFAULT_RESTORE_MAX_WAIT_S = 60.0
_KEYS = ("policy", "prefill_compute_share", "allow_untested_vllm", "restore_max_wait_s")
_EXAMPLE = '{"patched_scheduler": {"policy": "fix", "prefill_compute_share": 0.4}}'


class PatchedConfigError(ValueError):
    """The additional config, or the vLLM version, does not allow the plugin to run."""


@dataclass(frozen=True)
class PatchedConfig:
    """The plugin's validated settings."""

    policy: Policy
    prefill_compute_share: float = DEFAULT_PREFILL_SHARE
    allow_untested_vllm: bool = False
    restore_max_wait_s: float = DEFAULT_RESTORE_MAX_WAIT_S

    def to_additional_config(self) -> str:
        """The `--additional-config` JSON that configures a vLLM engine this way."""
        section: dict[str, object] = {
            "policy": self.policy,
            "prefill_compute_share": self.prefill_compute_share,
        }
        if self.allow_untested_vllm:
            section["allow_untested_vllm"] = True
        if self.restore_max_wait_s != DEFAULT_RESTORE_MAX_WAIT_S:
            section["restore_max_wait_s"] = self.restore_max_wait_s
        return json.dumps({CONFIG_KEY: section}, separators=(",", ":"))


def _share(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PatchedConfigError(
            f"prefill_compute_share must be a number in (0, 1), not {value!r}; e.g. {_EXAMPLE}"
        )
    share = float(value)
    if not 0.0 < share < 1.0:
        raise PatchedConfigError(
            f"prefill_compute_share must be in (0, 1), not {share}: "
            "0 would switch the controller off and 1 would starve decodes"
        )
    return share


def _max_wait(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PatchedConfigError(
            f"restore_max_wait_s must be a number of seconds >= 0, not {value!r}"
        )
    return float(value)


def parse_config(additional: Mapping[str, Any] | None) -> PatchedConfig:
    """Validate vLLM's `additional_config` dict; raise PatchedConfigError with the fix."""
    section = (additional or {}).get(CONFIG_KEY)
    if section is None:
        raise PatchedConfigError(f"no {CONFIG_KEY!r} in --additional-config; pass {_EXAMPLE}")
    if not isinstance(section, Mapping):
        raise PatchedConfigError(f"{CONFIG_KEY!r} must be a JSON object, e.g. {_EXAMPLE}")
    fields = cast(Mapping[str, object], section)
    unknown = sorted(set(fields) - set(_KEYS))
    if unknown:
        raise PatchedConfigError(
            f"unknown {CONFIG_KEY} key(s) {', '.join(unknown)}; known: {', '.join(_KEYS)}"
        )
    policy = fields.get("policy")
    if policy not in POLICIES:
        raise PatchedConfigError(f"policy must be 'base' or 'fix', not {policy!r}")
    allow = fields.get("allow_untested_vllm", False)
    if not isinstance(allow, bool):
        raise PatchedConfigError(f"allow_untested_vllm must be true or false, not {allow!r}")
    share = _share(fields.get("prefill_compute_share", DEFAULT_PREFILL_SHARE))
    max_wait = _max_wait(fields.get("restore_max_wait_s", DEFAULT_RESTORE_MAX_WAIT_S))
    return PatchedConfig(policy, share, allow, max_wait)


def check_version(version: str, allow_untested: bool) -> str | None:
    """A refusal message when `version` is untested and not allowed, else None."""
    if version in TESTED_VLLM_VERSIONS or allow_untested:
        return None
    return (
        f"vLLM {version} is untested with the patched scheduler "
        f"(tested: {', '.join(TESTED_VLLM_VERSIONS)}); its schedule() may have changed. "
        f'To try anyway set "allow_untested_vllm": true in {CONFIG_KEY} '
        f"or {ALLOW_UNTESTED_ENV}=1"
    )
