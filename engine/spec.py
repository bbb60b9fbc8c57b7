"""Parse the engine spec strings given after --engine / --base / --fix.

Forms (see DESIGN.md): `sim:base`, `sim:fix`, `url:http://HOST:PORT`, `vllm:MODEL_DIR`,
`patched:base` / `patched:fix` (optionally `patched:fix:MODEL_DIR`; else the kit's model),
and anything else containing `/` or `:` is a docker image reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from engine.errors import EngineError

EngineKind = Literal["sim", "docker", "url", "vllm", "patched"]
SIM_POLICIES = ("base", "fix")

_IMAGE_RE = re.compile(
    r"^[a-z0-9][a-z0-9._\-/]*(:[A-Za-z0-9_][A-Za-z0-9._\-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)
_SPEC_HINT = (
    "use sim:base, sim:fix, url:http://HOST:PORT, vllm:MODEL_DIR, patched:base, patched:fix "
    "or a docker image"
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
        if not re.match(r"^https?://[^/\s]+", url):
            raise EngineError(f"bad engine URL in {raw!r}", "write url:http://HOST:PORT")
        return EngineSpec("url", url, text)
    if text.startswith("vllm:"):
        model = text[5:]
        if not model:
            raise EngineError(f"missing model directory in {raw!r}", "write vllm:MODEL_DIR")
        return EngineSpec("vllm", model, text)
    if text.startswith("patched:"):
        policy, _, model = text[8:].partition(":")
        if policy not in SIM_POLICIES:
            raise EngineError(f"unknown patched policy {policy!r} in {raw!r}", _PATCHED_HINT)
        if _ and not model:
            raise EngineError(f"missing model directory in {raw!r}", _PATCHED_HINT)
        return EngineSpec("patched", policy, text, model or None)
    if ("/" in text or ":" in text) and _IMAGE_RE.match(text):
        return EngineSpec("docker", text, text)
    raise EngineError(f"unknown engine spec {raw!r}", _SPEC_HINT)
