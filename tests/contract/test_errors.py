"""The one exception tree and the one way a validation error becomes a line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from stallkit.contract.errors import StallkitError, failure_words, validation_message
from stallkit.engine.errors import EngineError
from stallkit.engine.sim.core import SimRequestError
from stallkit.kits.errors import USER_ERRORS, KitError
from stallkit.loadgen.errors import LoadError
from stallkit.monitor.errors import MonitorError
from stallkit.reports.errors import ReportError

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("contract", "engine", "loadgen", "monitor", "kits", "reports")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")
    duration_s: float = Field(1.0, gt=0)
    low: int = 0
    high: int = 1

    @model_validator(mode="after")
    def _order(self) -> _Model:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        return self


def _error(**data: object) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        _Model.model_validate(data)
    return info.value


@pytest.mark.parametrize(
    "cls", [EngineError, SimRequestError, LoadError, MonitorError, KitError, ReportError]
)
def test_every_role_error_is_a_stallkit_error_with_message_and_hint(
    cls: type[StallkitError],
) -> None:
    exc = cls("it broke", "do this")
    assert isinstance(exc, StallkitError) and isinstance(exc, USER_ERRORS)
    assert (str(exc), exc.message, exc.hint) == ("it broke", "it broke", "do this")


def test_validation_message_names_the_field_or_the_flag() -> None:
    exc = _error(duration_s=-5)
    assert validation_message(exc) == "duration_s: Input should be greater than 0"
    flags = {"duration_s": "--duration", "low": "--low", "high": "--high"}
    assert validation_message(exc, names=flags) == "--duration: Input should be greater than 0"


def test_validation_message_of_a_cross_field_check_and_an_unknown_key() -> None:
    exc = _error(low=3, high=2)
    assert validation_message(exc) == "config: low (3) must not exceed high (2)"
    names = {"low": "--low", "high": "--high"}
    assert (
        validation_message(exc, names=names, default="") == "--low (3) must not exceed --high (2)"
    )
    assert validation_message(_error(nope=1)) == "nope: unknown key"


def _sources() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))]


def test_only_the_contract_reads_a_validation_errors_details() -> None:
    # one place turns a ValidationError into the one-line message: nobody else calls .errors()
    callers = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "errors"
                and not node.args
            ):
                callers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert callers and all(c.startswith("contract/errors.py:") for c in callers), callers


def test_no_role_defines_its_own_root_exception() -> None:
    # every exception class of the packages derives, directly or not, from StallkitError
    roots = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                if bases & {"Exception", "BaseException", "RuntimeError", "ValueError"}:
                    roots.append(f"{path.relative_to(REPO)}:{node.name}")
    # TokenizeFailed never reaches a user: the agent turns it into the turn's recorded outcome;
    # the vLLM plugin runs inside vLLM's engine core and imports nothing of the tool's
    # (vllm, prometheus_client, the standard library and the controller only), so its config
    # error is vLLM's to report; the engine image's entrypoint runs inside the container with
    # the engine package alone, and turns its profile error into one line and exit 2 itself
    assert roots == [
        "contract/errors.py:StallkitError",
        "engine/image/entrypoint.py:ProfileError",
        "engine/vllm_plugin/config.py:PatchedConfigError",
        "loadgen/tokens.py:TokenizeFailed",
    ], roots


def test_failure_words_never_end_on_an_empty_colon() -> None:
    """An exception with an empty message (httpx's ReadTimeout often has one) reads as what
    was being done and its type; one with a message keeps it, on one line."""
    assert (
        failure_words("GET http://x/metrics", TimeoutError())
        == "GET http://x/metrics: TimeoutError"
    )
    said = failure_words("GET http://x", OSError("refused\n  twice"))
    assert said == "GET http://x: OSError: refused twice"
