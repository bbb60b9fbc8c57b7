"""The kit setting that switches the twin's load failures on: `[twin] kv_load_fail_every`."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stallkit.engine.twin.config import TwinConfig
from stallkit.kits.kit import TwinSection


def test_a_kit_that_sets_it_hands_it_to_the_twin() -> None:
    settings = TwinSection(kv_load_fail_every=2).kv_settings()
    assert settings["kv_load_fail_every"] == 2
    assert TwinConfig(**settings).kv_load_fail_every == 2


def test_unset_it_is_the_twins_default_none_fail() -> None:
    assert TwinSection().kv_load_fail_every == TwinConfig().kv_load_fail_every == 0


def test_the_kit_takes_the_twins_defaults_and_descriptions() -> None:
    twin = TwinConfig()
    assert TwinSection().kv_settings() == {
        name: getattr(twin, name)
        for name in ("kv_link_latency_s", "kv_seconds_per_block", "kv_host_blocks")
    } | {"kv_load_fail_every": 0}
    kit_text = TwinSection.model_fields["kv_host_blocks"].description or ""
    assert kit_text.startswith(TwinConfig.model_fields["kv_host_blocks"].description or "?")
    assert TwinSection().empty_step_s is None  # the calibration's, not the twin's own default


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ValidationError):
        TwinSection(kv_load_fail_every=-1)
