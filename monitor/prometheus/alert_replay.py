"""When the generated alert rules would have fired over a history. Pure.

Prometheus evaluates an alert's expression at each evaluation; a series it returns is
active (pending) from the first evaluation that returned it, firing once it has been
returned at every evaluation for the rule's `for:`, and resolved at the first evaluation
that no longer returns it. `AlertReplay` applies exactly that to the expression's values
over a range (`query_range` at the evaluation interval, window after window, so Prometheus
itself evaluates the PromQL) and lists each alert's life.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stallkit.contract.fleet import AlertFiring


class AlertReplay:
    """One alert rule's series over consecutive evaluation grids."""

    def __init__(
        self, alert: str, for_s: float, rule_labels: Mapping[str, str], group_by: str
    ) -> None:
        self.alert = alert
        self.for_s = for_s
        self._rule_labels = dict(rule_labels)
        self._group_by = group_by
        self._open: dict[tuple[tuple[str, str], ...], AlertFiring] = {}
        self.done: list[AlertFiring] = []

    def feed(self, result: Sequence[Mapping[str, Any]], evaluations: Sequence[float]) -> None:
        """One window: the expression's matrix and the window's evaluation times, in order."""
        held: dict[float, set[tuple[tuple[str, str], ...]]] = {t: set() for t in evaluations}
        for series in result:
            labels = {k: v for k, v in series.get("metric", {}).items() if k != "__name__"}
            key = tuple(sorted({**labels, **self._rule_labels}.items()))
            for ts, _value in series.get("values", []):
                held.setdefault(round(float(ts), 3), set()).add(key)
        for t in sorted(held):
            self._evaluate(t, held[t])

    def _evaluate(self, t: float, active: set[tuple[tuple[str, str], ...]]) -> None:
        for key in [k for k in self._open if k not in active]:
            self.done.append(self._open.pop(key).model_copy(update={"resolved": t}))
        for key in active:
            alert = self._open.get(key)
            if alert is None:
                labels = dict(key)
                alert = AlertFiring(
                    alert=self.alert, engine=labels.get(self._group_by, ""), labels=labels,
                    active=t, fired=None, resolved=None,
                )  # fmt: skip
                self._open[key] = alert
            if alert.fired is None and t - alert.active >= self.for_s - 1e-9:
                self._open[key] = alert.model_copy(update={"fired": t})

    def finish(self) -> list[AlertFiring]:
        """Every alert's life, by start; those still active have no `resolved`."""
        return sorted([*self.done, *self._open.values()], key=lambda a: (a.active, a.engine))
