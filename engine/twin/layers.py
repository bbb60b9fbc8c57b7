"""A model's layer layout for the twin, without weights: which attention each layer has.

vLLM gives a hybrid model (sliding-window layers beside full-attention ones) one KV cache group
per kind of layer, each with its own block arithmetic; the twin builds those groups from a
layout written `KIND:COUNT[@WINDOW]` segments, comma-separated, in the model's layer order:
`full:24` (24 full-attention layers), `sliding:5@1024,full:1` (five layers attending to the
last 1024 tokens, then one full). A preset names a public model's layout (`PRESETS`).
State-space (`mamba`) layers are refused: the twin does not build their state yet. Pure: a
kit is validated without vLLM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["LAYERS_HELP", "PRESETS", "Layer", "check_layers", "parse_layers"]

#: the syntax, for a field's description and an error's hint
LAYERS_HELP = (
    "comma-separated KIND:COUNT[@WINDOW] in layer order, KIND full or sliding (WINDOW: the "
    "sliding window in tokens), e.g. 'full:12,sliding:12@4096'; or a preset: "
)

#: public models' layouts (their Hugging Face configs' layer counts and windows)
PRESETS: dict[str, str] = {
    # Gemma 3 27B: 62 layers, every sixth global, local window 1024
    "gemma-3-27b": ",".join(["sliding:5@1024,full:1"] * 10 + ["sliding:2@1024"]),
    # gpt-oss-20b: 24 layers alternating sliding (window 128) and full
    "gpt-oss-20b": ",".join(["sliding:1@128,full:1"] * 12),
    # gpt-oss-120b: 36 layers alternating sliding (window 128) and full
    "gpt-oss-120b": ",".join(["sliding:1@128,full:1"] * 18),
}

_SEGMENT = re.compile(r"^([a-z]+):(\d+)(?:@(\d+))?$")
_MAX_LAYERS = 4096


@dataclass(frozen=True)
class Layer:
    """One layer's attention: full (`window` None) or a sliding window of `window` tokens."""

    window: int | None = None

    @property
    def kind(self) -> str:
        """`full` or `sliding`."""
        return "full" if self.window is None else "sliding"


def parse_layers(text: str) -> tuple[Layer, ...]:
    """The layers `text` names, in order; ValueError (one line) when it does not parse."""
    body = PRESETS.get(text.strip(), text)
    layers: list[Layer] = []
    for raw in body.split(","):
        segment = raw.strip()
        match = _SEGMENT.match(segment)
        if match is None:
            raise ValueError(f"layer segment {segment!r} does not parse: {_hint()}")
        kind, count, window = match.group(1), int(match.group(2)), match.group(3)
        if kind == "mamba":
            raise ValueError("mamba layers are not supported by the twin yet")
        if kind not in ("full", "sliding"):
            raise ValueError(f"unknown layer kind {kind!r} in {segment!r}: {_hint()}")
        if count < 1:
            raise ValueError(f"layer segment {segment!r} has no layers (count 0)")
        if kind == "full" and window is not None:
            raise ValueError(f"full layers take no window ({segment!r}); use sliding:N@W")
        if kind == "sliding" and (window is None or int(window) < 1):
            raise ValueError(f"sliding layers need a window of 1 or more tokens ({segment!r})")
        layers.extend([Layer(None if window is None else int(window))] * count)
    if len(layers) > _MAX_LAYERS:
        raise ValueError(f"{len(layers)} layers; the twin takes at most {_MAX_LAYERS}")
    return tuple(layers)


def check_layers(text: str | None) -> str | None:
    """`text` when it parses (None: the twin's one full-attention layer); else ValueError."""
    if text is not None:
        parse_layers(text)
    return text


def _hint() -> str:
    return LAYERS_HELP + ", ".join(sorted(PRESETS))
