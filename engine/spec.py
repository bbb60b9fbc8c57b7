"""Parse the engine spec strings given after --engine / --base / --fix.

Forms: `sim:base`, `sim:fix`, `url:http://HOST:PORT`, `vllm:MODEL_DIR`, `patched:base` /
`patched:fix` (optionally `patched:fix:MODEL_DIR`; else the kit's model), or a docker image
reference with its repository path (`vllm/vllm-openai:v0.32`, `registry:5000/team/engine`).
A bare `word:rest` with no `/` is a docker image only when docker has a local image of that
name (one built here, e.g. `myfork:fix`); otherwise it is read as a mistyped form (`sim2:base`,
`nosuch:thing`) and refused with the list of forms, in a dry run as in a run, instead of being
handed to docker to pull. An image of Docker Hub's library is written with its path
(`library/NAME:TAG`).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from contract.meta import EngineKind
from contract.urls import url_problem
from engine.errors import EngineError

SIM_POLICIES = ("base", "fix")

_IMAGE_RE = re.compile(
    r"^([A-Za-z0-9.\-]+:[0-9]+/)?"  # a registry with a port
    r"[a-z0-9][a-z0-9._\-/]*(:[A-Za-z0-9_][A-Za-z0-9._\-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)
_SPEC_HINT = (
    "use sim:base, sim:fix, url:http://HOST:PORT, vllm:MODEL_DIR, patched:base, patched:fix "
    "or a docker image with its repository path (e.g. vllm/vllm-openai:TAG, library/NAME:TAG)"
)
_PATCHED_HINT = "write patched:base or patched:fix, optionally followed by :MODEL_DIR"


@dataclass(frozen=True)
class EngineSpec:
    """A parsed engine spec: what to launch (or attach to) for one arm."""

    kind: EngineKind
    #: policy for sim and patched, image for docker, URL for url, model directory for vllm
    target: str
    raw: str
    #: the model directory a patched arm serves, when the spec names one (else the kit's)
    model: str | None = None

    @property
    def label(self) -> str:
        """A short name for tables and directory names."""
        return self.raw


def _local_image(image: str) -> bool:
    """Whether docker has a local image of this name (False when docker cannot tell)."""
    try:
        found = subprocess.run(
            ["docker", "image", "inspect", image], capture_output=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return found.returncode == 0


def parse_spec(raw: str) -> EngineSpec:
    """Parse one engine spec string; raise EngineError with a hint on an unknown form."""
    text = raw.strip()
    if not text:
        raise EngineError("empty engine spec", _SPEC_HINT)
    if text.startswith("sim:"):
        policy = text[4:]
        if policy not in SIM_POLICIES:
            raise EngineError(
                f"unknown simulator policy {policy!r} in {raw!r}", "use sim:base or sim:fix"
            )
        return EngineSpec("sim", policy, text)
    if text.startswith("url:"):
        url = text[4:].rstrip("/")
        problem = url_problem(url)
        if problem is not None:
            raise EngineError(f"bad engine URL in {raw!r}: {problem}", "write url:http://HOST:PORT")
        return EngineSpec("url", url, text)
    if text.startswith("vllm:"):
        model = text[5:]
        if not model:
            raise EngineError(f"missing model directory in {raw!r}", "write vllm:MODEL_DIR")
        return EngineSpec("vllm", model, text)
    if text.startswith("patched:"):
        policy, sep, model = text[8:].partition(":")
        if policy not in SIM_POLICIES:
            raise EngineError(f"unknown patched policy {policy!r} in {raw!r}", _PATCHED_HINT)
        if sep and not model:
            raise EngineError(f"missing model directory in {raw!r}", _PATCHED_HINT)
        return EngineSpec("patched", policy, text, model or None)
    prefix, colon, _ = text.partition(":")
    if colon and "/" not in text:
        if _IMAGE_RE.match(text) and _local_image(text):
            return EngineSpec("docker", text, text)
        raise EngineError(
            f"unknown engine spec form {prefix + ':'!r} in {raw!r} (and no local docker image "
            "of that name)",
            _SPEC_HINT,
        )
    if "/" in text and _IMAGE_RE.match(text):
        return EngineSpec("docker", text, text)
    raise EngineError(f"unknown engine spec {raw!r}", _SPEC_HINT)
