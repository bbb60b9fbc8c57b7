"""A kit's load defaults never refuse a kit that did not set them: a system prompt or a turn
size left unset follows the context bounds the kit (or a corpus case's override) sets, while a
value the kit set itself is kept and a clash it makes is still refused, naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from stallkit.kits.errors import KitError
from stallkit.kits.kit import load_kit
from stallkit.loadgen import sizes_for_unset
from tests.support import kit, one_error_line

_KIT = """\
name = "small"
[load]
agents = 2
duration_s = 30
min_context = 1000
max_context = 9000
"""


def test_an_unset_system_prompt_follows_a_small_min_context(tmp_path: Path) -> None:
    path = tmp_path / "small.toml"
    path.write_text(_KIT)
    load = load_kit(str(path)).load
    assert load.system_prompt_tokens == 500 < load.min_context  # the default, 1000, would clash
    assert (load.new_tokens_max, load.reply_tokens_max) == (4000, 1000)  # they fit: kept
    # as an override (a corpus case's), the same
    overridden = load_kit("restore-stall", {"load.min_context": 1000, "load.max_context": 9000})
    assert overridden.load.system_prompt_tokens == 500


def test_a_value_the_kit_set_is_kept_and_its_clash_refused(tmp_path: Path) -> None:
    path = tmp_path / "small.toml"
    path.write_text(_KIT + "system_prompt_tokens = 1000\n")
    with pytest.raises(KitError, match=r"system_prompt_tokens \(1000\) must be below"):
        load_kit(str(path))
    done = kit("ab", "--kit", str(path), "--dry-run")
    assert "system_prompt_tokens (1000) must be below min_context (1000)" in one_error_line(done)


def test_an_unset_turn_size_takes_the_room_the_set_one_leaves() -> None:
    # 2000 tokens between the bounds: new content 1500 as set, a reply of 500 (not 1000)
    given = {"min_context": 1000, "max_context": 3000, "new_tokens_max": 1500}
    assert sizes_for_unset(given) == {
        "system_prompt_tokens": 500,
        "reply_tokens_max": 500,
    }
    # neither set: both shrink in proportion; both set: kept, for the model to judge
    assert sizes_for_unset({"min_context": 1000, "max_context": 2000}) == {
        "system_prompt_tokens": 500,
        "new_tokens_max": 800,
        "reply_tokens_max": 200,
        "new_tokens_min": 500,
        "reply_tokens_min": 100,
    }
    both = {"min_context": 1000, "max_context": 2000, "new_tokens_max": 900}
    assert sizes_for_unset(both | {"reply_tokens_max": 900}) == {"system_prompt_tokens": 500}
    # defaults that fit: nothing changes
    assert sizes_for_unset({}) == {}
