"""Metric dialects: each engine family's `/metrics` names for the monitor's signals.

One class per dialect (`vllm`, `sglang`, `llamacpp`, `tgi`), found here by name or told
apart from a page by its family prefixes; code elsewhere asks a dialect, never compares
its name. `stallkit.monitor.signals.parse` reads a page (or a Prometheus answer) through a
dialect into the engine-neutral `EngineMetrics`.
"""

from __future__ import annotations

from collections.abc import Iterable

from stallkit.contract import names
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.signals.dialects.base import KIND_NEEDS, Dialect, Series, Signal
from stallkit.monitor.signals.dialects.llamacpp import Llamacpp
from stallkit.monitor.signals.dialects.sglang import Sglang
from stallkit.monitor.signals.dialects.tgi import Tgi
from stallkit.monitor.signals.dialects.vllm import Vllm

__all__ = [
    "DIALECTS",
    "KIND_NEEDS",
    "VLLM",
    "Dialect",
    "Series",
    "Signal",
    "detect_dialect",
    "dialect_named",
    "dialect_of_samples",
]

#: Every dialect, in the order a page is matched against them.
DIALECTS: tuple[Dialect, ...] = (Vllm(), Sglang(), Llamacpp(), Tgi())
assert tuple(d.name for d in DIALECTS) == names.DIALECT_NAMES
_BY_NAME = {d.name: d for d in DIALECTS}
#: The dialect a page without any engine family is read in (its snapshot is empty anyway).
VLLM = _BY_NAME["vllm"]


def dialect_named(name: str) -> Dialect:
    """The dialect called `name`; an unknown name is a `MonitorError` with the known ones."""
    found = _BY_NAME.get(name.strip().lower())
    if found is None:
        raise MonitorError(
            f"unknown metric dialect {name!r}", hint=f"one of: {', '.join(_BY_NAME)}"
        )
    return found


def detect_dialect(text: str) -> Dialect | None:
    """The dialect whose families the page declares or carries (the first in order)."""
    return next((d for d in DIALECTS if d.recognises(text)), None)


def dialect_of_samples(sample_names: Iterable[str]) -> Dialect | None:
    """The dialect of an engine's series (as a Prometheus answer names them)."""
    found = set(sample_names)
    return next((d for d in DIALECTS if any(d.owns(n) for n in found)), None)
