"""What a person sees during `kit run` / `kit ab`: the monitor's dashboard plus an agents
panel and a progress bar, or plain log lines when stdout is not a terminal.

Everything shown is in engine seconds: the monitor's events (wall seconds since it started)
are converted with the arm's nominal time scale before they are displayed, so durations and
rates read as the engine's (the wall rate is stated once when the arm starts). One engine
clock is on screen, the view's own (wall seconds since the load started, at the nominal
scale): the header's time and the progress bar both read it, and the end's line states the
simulator's own clock apart where it ran differently (it lags when starved of CPU and stands
still while its process is stopped). The timeline keeps the monitor's own events; reports
convert those with the measured scale."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from stallkit.contract.meta import ArmMeta
from stallkit.loadgen import AgentState, TurnFinished
from stallkit.monitor import (
    Dashboard,
    LogLines,
    MonitorEvent,
    Sample,
    Verdict,
    fmt_s,
    live_dashboard,
)

#: event fields that hold a time or a duration (wall seconds in the monitor's events)
_TIME_FIELDS = ("t", "onset", "duration_s", "stall_s", "down_s", "since", "seconds")


def in_engine_time(event: Any, scale: float) -> Any:
    """A copy of a monitor event with its times and durations in engine seconds."""
    if scale == 1.0 or not dataclasses.is_dataclass(event) or isinstance(event, type):
        return event
    changes: dict[str, Any] = {}
    for name in _TIME_FIELDS:
        value = getattr(event, name, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            changes[name] = value * scale
    if isinstance(event, Sample) and event.deltas is not None:
        changes["deltas"] = dataclasses.replace(event.deltas, dt_s=event.deltas.dt_s * scale)
    if isinstance(event, Verdict):
        changes["state"] = in_engine_time(event.state, scale)
    return dataclasses.replace(event, **changes)


_STATE_STYLE = {
    "queued": "yellow",
    "streaming": "green",
    "thinking": "cyan",
    "waiting": "dim",
    "failed": "red",
    "done": "dim",
}


class RunView:
    """Shows an arm live (terminal) or as log lines: a sink of its monitor events, and the
    agents' states and turns (`load`)."""

    def __init__(
        self,
        console: Console,
        arm: str,
        spec: str,
        duration_s: float,
        dashboard: bool,
        scale: float = 1.0,
    ) -> None:
        self.console = console
        self.scale = scale
        self.arm, self.spec = arm, spec
        self.duration_s = duration_s
        self.enabled = dashboard and console.is_terminal
        self.agents: dict[int, str] = {}
        self.turns: Counter[int] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.started: float | None = None
        self.dashboard: Dashboard | None = None
        self.lines = LogLines(console, every_s=5.0)

    def load(self, event: AgentState | TurnFinished) -> None:
        """Take one event of the agents (their states and finished turns)."""
        if isinstance(event, AgentState):
            self.agents[event.agent] = event.state
            return
        rec = event.record
        self.outcomes[rec.outcome] += 1
        if rec.outcome == "ok":
            self.turns[rec.agent] += 1
        elif not self.enabled and rec.outcome != "aborted":
            self.console.print(
                f"[{rec.t_end * self.scale:8.1f}s] agent {rec.agent} turn {rec.turn}: {rec.outcome} {rec.error or ''}",
                markup=False,
                highlight=False,
            )

    def handle(self, event: MonitorEvent) -> None:
        """Take one monitor event (the view is one of the arm recorder's sinks)."""
        event = in_engine_time(event, self.scale)
        if self.dashboard is not None:
            self.dashboard.update(event)
        else:
            self.lines.handle(event)

    def note(self, message: str) -> None:
        self.console.log(message)

    def _agents_panel(self) -> RenderableType:
        table = Table.grid(padding=(0, 2))
        row: list[Text] = []
        for agent in sorted(self.agents):
            state = self.agents[agent]
            row.append(
                Text.assemble(
                    (f"{agent:>2} ", "bold"),
                    (f"{state:<9}", _STATE_STYLE.get(state, "")),
                    (f" {self.turns[agent]} turns", "dim"),
                )
            )
        for start in range(0, len(row), 4):
            table.add_row(*row[start : start + 4])
        counts = (
            ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
            or "no turn finished yet"
        )
        return Panel(
            Group(table, Text(counts, style="dim")),
            title=f"agents ({self.arm}: {self.spec})",
            title_align="left",
        )

    def _agents_line(self) -> RenderableType:
        """The agents panel in a small terminal: how many are in each state, the turns' outcomes."""
        states = Counter(self.agents.values())
        text = Text.assemble((f"agents ({self.arm}: {self.spec}) ", "bold"))
        text += Text(f"{len(self.agents)}: ")
        for n, (state, count) in enumerate(sorted(states.items())):
            text += Text(("" if n == 0 else ", ") + f"{count} {state}", _STATE_STYLE.get(state, ""))
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        return Group(text, Text("turns: " + (outcomes or "none finished yet"), style="dim"))

    def wall_elapsed(self) -> float:
        """Wall seconds since the load started (0 before)."""
        return 0.0 if self.started is None else time.monotonic() - self.started

    def engine_elapsed(self) -> float:
        """The one engine clock on screen: the load's wall seconds at the nominal scale."""
        return self.wall_elapsed() * self.scale

    def ran(self, meta: ArmMeta) -> str:
        """How long an arm ran, on the screen's engine clock, for its end's line (the
        simulator's own clock said apart where it differs by more than a second in a hundred)."""
        if self.scale == 1.0:
            return f"{meta.wall_s:.1f} wall s"
        nominal = meta.wall_s * self.scale
        said = f"{nominal:.0f} engine s at {self.scale:g}x ({meta.wall_s:.1f} wall s)"
        own = meta.engine_s
        if own is not None and abs(own - nominal) > 0.01 * nominal:
            said += f"; the simulator's own clock ran {own:.0f} s"
        return said

    def _progress(self) -> tuple[ProgressBar, Text]:
        elapsed = self.wall_elapsed()
        total = max(self.duration_s, 1e-9)
        bar = ProgressBar(total=total, completed=min(elapsed, total), width=30)
        engine = f"{fmt_s(elapsed * self.scale)} of {fmt_s(self.duration_s * self.scale)} engine"
        return bar, Text(f"{engine} ({fmt_s(elapsed)} wall)", style="dim")

    def _progress_panel(self) -> RenderableType:
        bar, text = self._progress()
        bar.width = 50
        return Group(bar, text)

    def _progress_line(self) -> RenderableType:
        """The progress bar and the engine time it stands for, on one line."""
        grid = Table.grid(padding=(0, 2))
        grid.add_row(*self._progress())
        return grid

    @contextlib.asynccontextmanager
    async def live(self, url: str) -> AsyncIterator[None]:
        """Show the live view (or nothing extra in log-line mode) while the block runs."""
        self.started = time.monotonic()
        if not self.enabled:
            yield
            return
        self.dashboard = Dashboard(url, elapsed=self.engine_elapsed)
        self.dashboard.add_panel(self._agents_panel, compact=self._agents_line)
        self.dashboard.add_panel(self._progress_panel, compact=self._progress_line)
        try:
            async with live_dashboard(self.dashboard, self.console):
                yield
        finally:
            self.dashboard = None
