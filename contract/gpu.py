"""Where GPU utilisation comes from, as a typed spec that engines build and the monitor reads.

A launcher knows where its engine's GPU readings are (the GPUs it pinned, the simulator's
DCGM page); the monitor knows how to read them. What passes between the two is a
`GpuSource`, never a string either side pieces together. Its text form is the flag form:

    none                      watch no GPU (the stall rule runs on metrics alone)
    auto                      the launcher's source (a kit), or the engine's own DCGM page
    nvml | nvml:0,1           local GPUs through nvidia-ml-py (bare: every GPU found)
    smi | smi:0,1             local GPUs through `nvidia-smi` (bare: every GPU found)
    dcgm:http://HOST:PORT/... a DCGM exporter's page (remote GPUs; the simulator serves one)

`parse(text)` reads it (a bad form raises `GpuSourceError` with the hint below) and `str()`
gives it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, get_args
from urllib.parse import urlsplit

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema

from stallkit.contract.errors import StallkitError

__all__ = ["SPEC_HINT", "GpuKind", "GpuSource", "GpuSourceError", "GpuSourceField", "parse"]

GpuKind = Literal["none", "auto", "nvml", "smi", "dcgm"]
KINDS: tuple[GpuKind, ...] = get_args(GpuKind)
SPEC_HINT = "use nvml:0,1 | smi:0,1 | dcgm:http://HOST:PORT/metrics | none"


class GpuSourceError(StallkitError):
    """A GPU-source spec that does not parse."""


@dataclass(frozen=True, slots=True)
class GpuSource:
    """A GPU-utilisation source: its kind, the local GPU ids (nvml, smi) or the URL (dcgm)."""

    kind: GpuKind = "none"
    #: local GPU indices for nvml / smi; empty: every GPU the driver reports
    gpus: tuple[int, ...] = ()
    #: the DCGM exporter page, for dcgm
    url: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise GpuSourceError(f"unknown GPU source kind {self.kind!r}", SPEC_HINT)
        if self.gpus and self.kind not in ("nvml", "smi"):
            raise GpuSourceError(f"GPU ids go with nvml or smi, not {self.kind}", SPEC_HINT)
        if any(isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in self.gpus):
            raise GpuSourceError(f"bad GPU ids {self.gpus!r}", SPEC_HINT)
        if (self.kind == "dcgm") != bool(self.url):
            raise GpuSourceError("a URL goes with dcgm, and dcgm needs one", SPEC_HINT)
        if self.url and not _is_http(self.url):
            raise GpuSourceError(f"dcgm needs an http(s) URL, not {self.url!r}", SPEC_HINT)

    @property
    def checked(self) -> bool:
        """Whether GPUs are watched at all (False for `none`; `auto` is not resolved yet)."""
        return self.kind not in ("none", "auto")

    @classmethod
    def parse(cls, text: str) -> GpuSource:
        """The spec written as `text` (see the module's forms); raises `GpuSourceError`."""
        return parse(text)

    def __str__(self) -> str:
        if self.kind == "dcgm":
            return f"dcgm:{self.url}"
        if self.gpus:
            return f"{self.kind}:{','.join(str(g) for g in self.gpus)}"
        return self.kind


def _is_http(url: str) -> bool:
    try:
        parts = urlsplit(url)
        _ = parts.port  # a non-numeric port raises here
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _ids(text: str, raw: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",")]
    if not text.strip():
        raise GpuSourceError(f"no GPU ids after the colon in {raw!r}", SPEC_HINT)
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise GpuSourceError(f"bad GPU ids in {raw!r}", SPEC_HINT)
    return tuple(int(p) for p in parts)


def parse(text: str) -> GpuSource:
    """Read a GPU-source spec (`none`, `auto`, `nvml:0,1`, `smi`, `dcgm:URL`, ...)."""
    raw = text.strip()
    head, colon, rest = raw.partition(":")
    kind = head.lower()
    if kind in ("nvml", "smi"):
        return GpuSource(kind, _ids(rest, raw) if colon else ())  # type: ignore[arg-type]
    if kind == "dcgm" and colon:
        url = rest.strip()
        if not _is_http(url):
            raise GpuSourceError(f"dcgm needs an http(s) URL in {raw!r}", SPEC_HINT)
        return GpuSource("dcgm", url=url)
    if kind in ("none", "auto") and not colon:
        return GpuSource(kind)  # type: ignore[arg-type]
    raise GpuSourceError(f"unknown GPU source {raw!r}", SPEC_HINT)


def _validate(value: object) -> GpuSource:
    if isinstance(value, GpuSource):
        return value
    if not isinstance(value, str):
        raise ValueError(f"a GPU source is a string ({SPEC_HINT})")
    try:
        return parse(value)
    except GpuSourceError as exc:
        # pydantic reports ValueErrors as data; the hint rides along in the one line
        raise ValueError(f"{exc.message} ({exc.hint})") from None


#: A config field holding a GPU source: parsed from its text form once, saved as text.
GpuSourceField = Annotated[
    GpuSource,
    PlainValidator(_validate),
    PlainSerializer(str, return_type=str),
    WithJsonSchema(
        {"type": "string", "description": "none | auto | nvml[:IDS] | smi[:IDS] | dcgm:URL"}
    ),
]
