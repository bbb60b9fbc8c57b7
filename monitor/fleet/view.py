"""The fleet's live view: one row per engine, the worst first, under a summary line.

`FleetDashboard.handle(event)` only records each engine's latest state (verdict, rate,
running/waiting, KV, GPUs); `render()` only describes, so the view is tested by rendering
into a `StringIO` console. Rows are sorted by state (stalled, suspect, down, then the rest)
and then by how long the state has held, and cut to `max_rows`, the rest counted in a last
line: a fleet of 500 engines shows its stalled ones and a summary, never 500 lines. It is
repainted by `stallkit.monitor.live.dashboard.live_dashboard`, like the one-engine view.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from stallkit.monitor.detect.events import DetectorState, Down, GpuReading, Sample, Verdict
from stallkit.monitor.fleet.bank import EngineAppeared, EngineEvent, EngineVanished, QueryFailed
from stallkit.monitor.fleet.sinks import summary_text
from stallkit.monitor.fleet.watch import AnyFleetEvent
from stallkit.monitor.live.dashboard import BANNER_STYLES, fmt_s

#: row order: worst first
_RANK = {"stalled": 0, "suspect": 1, "down": 2, "starting": 3, "ok": 4, "idle": 5}


@dataclass
class _Row:
    state: DetectorState = field(default_factory=lambda: DetectorState("starting"))
    gen_tok_s: float = 0.0
    running: int | None = None
    waiting: int | None = None
    kv_usage: float | None = None
    gpu_max: float | None = None
    error: str | None = None


class FleetDashboard:
    """The state of every engine of a fleet, updated from fleet events."""

    def __init__(self, source: str, *, max_rows: int = 30) -> None:
        self.source = source
        self.max_rows = max_rows
        self.rows: dict[str, _Row] = {}
        self.now = 0.0
        self.query_error: str | None = None

    def handle(self, event: AnyFleetEvent) -> None:
        """Record one event (cheap: called for every engine's every event)."""
        self.now = max(self.now, event.t)
        match event:
            case EngineAppeared(engine=engine):
                self.rows.setdefault(engine, _Row())
            case EngineVanished(engine=engine):
                self.rows.pop(engine, None)
            case QueryFailed(error=error):
                self.query_error = error
            case EngineEvent(engine=engine, event=inner):
                self.query_error = None
                row = self.rows.setdefault(engine, _Row())
                match inner:
                    case Verdict(state=state):
                        row.state = state
                    case Sample(snapshot=snap):
                        row.gen_tok_s = inner.gen_tok_s
                        row.running, row.waiting = snap.running, snap.waiting
                        row.kv_usage, row.error = snap.kv_usage, None
                    case GpuReading(util=util):
                        row.gpu_max = max(util.values()) if util else None
                    case Down(error=error):
                        row.error = error

    def summary(self) -> Text:
        """The line above the table: the fleet's counts by state, and the stall kinds."""
        statuses = {k: r.state.status for k, r in self.rows.items()}
        kinds: dict[str, int] = {}
        for row in self.rows.values():
            if row.state.status == "stalled" and row.state.kind is not None:
                kinds[row.state.kind] = kinds.get(row.state.kind, 0) + 1
        text = Text(summary_text(statuses), style="bold")
        if kinds:
            text += Text("  (" + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ")")
        if self.query_error:
            text += Text(f"  query failed: {self.query_error}", style="red")
        return text

    def _sorted(self) -> list[tuple[str, _Row]]:
        return sorted(
            self.rows.items(),
            key=lambda kv: (_RANK.get(kv[1].state.status, 9), -kv[1].state.seconds, kv[0]),
        )

    def table(self) -> Table:
        """The engines' rows, worst first, at most `max_rows` of them."""
        table = Table(expand=False, pad_edge=False, box=None, header_style="bold dim")
        for name, justify in (("engine", "left"), ("state", "left"), ("tok/s", "right"),
                              ("run", "right"), ("wait", "right"), ("KV", "right"),
                              ("GPU", "right")):  # fmt: skip
            table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
        rows = self._sorted()
        for engine, row in rows[: self.max_rows]:
            state = row.state
            words = state.status.upper()
            if state.status == "stalled":
                words = f"STALLED {state.kind} {fmt_s(state.seconds)}"
            elif state.status in ("suspect", "down"):
                words += f" {fmt_s(state.seconds)}"
            table.add_row(
                engine,
                Text(words, style=BANNER_STYLES[state.status]),
                f"{row.gen_tok_s:.1f}",
                "-" if row.running is None else str(row.running),
                "-" if row.waiting is None else str(row.waiting),
                "-" if row.kv_usage is None else f"{row.kv_usage:.0%}",
                "-" if row.gpu_max is None else f"{row.gpu_max:.0f}%",
            )
        if len(rows) > self.max_rows:
            rest = {k: r.state.status for k, r in rows[self.max_rows :]}
            table.add_row(Text(f"... {summary_text(rest).replace('engines', 'more')}", style="dim"))
        return table

    def render(self) -> RenderableType:
        """Header, summary line and the table."""
        header = Text.assemble(
            ("fleet ", "dim"), (self.source, "bold"), ("   watching ", "dim"), fmt_s(self.now)
        )
        return Group(header, self.summary(), self.table())
