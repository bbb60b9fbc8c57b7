"""What a metric dialect is: one engine family's `/metrics` names for the monitor's signals.

A dialect is a class (found through the registry in `stallkit.monitor.signals.dialects`):
its family prefixes (how a page is told apart), the series it reads into which field of
`EngineMetrics`, the label that splits data-parallel engines, and the signals its engine
does not export, with why. The stall kinds that need a missing signal are not available
for that engine: the detector cannot see their evidence, so it never names them (a stall
whose kind it cannot tell reads as `frozen`), and the report says which kinds and why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from stallkit.contract import names
from stallkit.contract.timeline import StallKind

#: A signal some engines do not export.
Signal = Literal["preemptions", "steps"]
#: The signal each kind's evidence needs, beyond pending work and progress (the others,
#: dead_core, busy_hang and frozen, need nothing more).
KIND_NEEDS: Mapping[StallKind, Signal] = {
    "thrashing": "preemptions",
    "blocked": "steps",
    "spinning": "steps",
}
SeriesKind = Literal["gauge", "counter", "histogram_count", "histogram_sum"]


@dataclass(frozen=True, slots=True)
class Series:
    """One family the monitor reads: its name as the engine declares it, the field it fills.

    `split`: a label whose values become a mapping (e.g. by finish reason); `only`: a
    (label, value) the samples must carry (the others are not read)."""

    name: str
    field: str
    kind: SeriesKind = "gauge"
    split: str = ""
    only: tuple[str, str] | None = None

    def sample_names(self) -> tuple[str, ...]:
        """The sample names it appears under (a counter with and without `_total`)."""
        bare = names.bare(self.name)
        if self.kind == "histogram_count":
            return tuple(dict.fromkeys((f"{self.name}_count", f"{bare}_count")))
        if self.kind == "histogram_sum":
            return tuple(dict.fromkeys((f"{self.name}_sum", f"{bare}_sum")))
        if self.kind == "counter" and bare == self.name:  # an exporter that writes no `_total`
            return (self.name, f"{self.name}_total")
        return tuple(dict.fromkeys((self.name, bare)))

    def promql(self, selector: str = "") -> str:
        """The sample's selector in PromQL (its first sample name, `only` as a matcher)."""
        parts = [
            p for p in (selector, f'{self.only[0]}="{self.only[1]}"' if self.only else "") if p
        ]
        inner = "{" + ", ".join(parts) + "}" if parts else ""
        return self.sample_names()[0] + inner


#: The simulator's own clock, read whatever dialect it speaks.
SIM_CLOCK = (
    Series(names.SIM_ENGINE_TIME, "sim_engine_s"),
    Series(names.SIM_TIME_SCALE, "sim_scale"),
)


class Dialect:
    """One engine family's metric names (subclasses fill the class attributes)."""

    name: ClassVar[str]
    #: what the engine is called in messages
    engine: ClassVar[str]
    #: family prefixes that tell a page in this dialect apart
    prefixes: ClassVar[tuple[str, ...]]
    #: the families read, and the fields they fill
    series: ClassVar[tuple[Series, ...]]
    #: the label that splits data-parallel engines ("": one engine per page)
    engine_label: ClassVar[str] = ""
    #: the signals the engine does not export, with why
    lacks: ClassVar[Mapping[Signal, str]] = {}
    #: a family the engine declares only once used reads 0 until then (a page recognised
    #: as this dialect then carries every signal)
    absent_is_zero: ClassVar[bool] = True

    def __init__(self) -> None:
        self._samples = {n: s for s in (*self.series, *SIM_CLOCK) for n in s.sample_names()}
        self._prefixes = tuple(self._samples)
        alternatives = "|".join(re.escape(p) for p in self.prefixes)
        self._family = re.compile(rf"^(?:# (?:TYPE|HELP) )?(?:{alternatives})", re.MULTILINE)

    def __repr__(self) -> str:
        return f"<dialect {self.name}>"

    @property
    def samples(self) -> Mapping[str, Series]:
        """Sample name -> the series it belongs to (the simulator's clock included)."""
        return self._samples

    @property
    def sample_prefixes(self) -> tuple[str, ...]:
        """Every sample name read, for a fast `str.startswith` filter of a page's lines."""
        return self._prefixes

    def recognises(self, text: str) -> bool:
        """Whether the page declares or carries one of this dialect's families."""
        return self._family.search(text) is not None

    def owns(self, sample_name: str) -> bool:
        """Whether a sample name is one of this dialect's families."""
        return sample_name.startswith(self.prefixes)

    def field_series(self, field: str) -> tuple[Series, ...]:
        """The series that fill one field (several: alternatives across releases)."""
        return tuple(s for s in self.series if s.field == field)

    @property
    def group_suffix(self) -> str:
        """What names this dialect's Prometheus rule groups apart from the others'."""
        return f"-{self.name}"

    @property
    def rule_labels(self) -> dict[str, str]:
        """Labels its rules add to what they record and fire (a mixed fleet's file holds one
        set of rules per dialect, each apart from the others)."""
        return {"dialect": self.name}

    def unavailable(self) -> dict[StallKind, str]:
        """The stall kinds this engine's page cannot show, each with why."""
        return {kind: self.lacks[need] for kind, need in KIND_NEEDS.items() if need in self.lacks}
