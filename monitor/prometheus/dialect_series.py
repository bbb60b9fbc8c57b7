"""Each signal's series in a dialect's names, as the alert rules write them in PromQL. Pure.

The rules (`stallkit.monitor.prometheus.rules`) read an engine's signals through this: its
running and waiting gauges, its token counters and live forward counter (progress), prompt
tokens, preemptions, KV usage, and the counters that move while a scheduler steps. A signal
the dialect does not export is an empty tuple, and the rules leave out what needs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from stallkit.monitor.signals.dialects import Dialect

#: vLLM's counters that move while a scheduler steps without output, in the rules' order
_ACTIVITY_FIELDS = ("prefix_queries", "steps", "iterations", "compute_s")


@dataclass(frozen=True, slots=True)
class PromSignals:
    """The sample names (PromQL selectors without matchers) of each signal in one dialect."""

    running: tuple[str, ...]
    waiting: tuple[str, ...]
    tokens: tuple[str, ...]  # generated tokens, then the live forward counter where there is one
    prompt: tuple[str, ...]
    preemptions: tuple[str, ...]
    kv: tuple[str, ...]  # alternatives across releases (the first present is read)
    activity: tuple[str, ...]
    prefix: str  # the dialect's family prefix (dropped from a label naming a counter)
    only: dict[str, str]  # sample name -> `label="value"` its samples must carry

    def sel(self, name: str, selector: str) -> str:
        """`name{selector}` with the matcher its samples must carry (if any)."""
        parts = [p for p in (selector.strip().strip("{}"), self.only.get(name, "")) if p]
        return name + ("{" + ", ".join(parts) + "}" if parts else "")


def prom_signals(dialect: Dialect) -> PromSignals:
    """The signals of `dialect` as sample names."""

    def names_of(*fields: str) -> tuple[str, ...]:
        return tuple(s.sample_names()[0] for f in fields for s in dialect.field_series(f))

    only = {s.sample_names()[0]: f'{s.only[0]}="{s.only[1]}"' for s in dialect.series if s.only}
    return PromSignals(
        running=names_of("running"),
        waiting=names_of("waiting"),
        tokens=names_of("gen_tokens", "forward_progress"),
        prompt=names_of("prompt_tokens"),
        preemptions=names_of("preemptions"),
        kv=names_of("kv_usage", "kv_usage_old"),
        activity=names_of(*_ACTIVITY_FIELDS),
        prefix=dialect.prefixes[0],
        only=only,
    )
