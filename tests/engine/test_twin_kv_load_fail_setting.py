"""The kit setting that switches the twin's load failures on: `[twin] kv_load_fail_every`."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stallkit.engine.twin.config import TwinConfig
from stallkit.kits.kit import TwinSection


def test_a_kit_that_sets_it_hands_it_to_the_twin() -> None:
    settings = TwinSection(kv_load_fail_every=2).kv_settings()
    assert settings == {"kv_load_fail_every": 2}
    assert TwinConfig(**settings).kv_load_fail_every == 2


def test_unset_it_is_the_twins_default_none_fail() -> None:
    assert "kv_load_fail_every" not in TwinSection().kv_settings()
    assert TwinConfig().kv_load_fail_every == 0


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ValidationError):
        TwinSection(kv_load_fail_every=-1)
