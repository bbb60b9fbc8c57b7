"""What a person sees during `kit run` / `kit ab`: the monitor's dashboard plus an agents
panel and a progress bar, or plain log lines when stdout is not a terminal."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from loadgen.run import AgentState, RunFinished, TurnFinished
from monitor.dashboard import Dashboard, LogLines, fmt_s, live_dashboard

_STATE_STYLE = {
    "queued": "yellow",
    "streaming": "green",
    "thinking": "cyan",
    "waiting": "dim",
    "failed": "red",
    "done": "dim",
}


class RunView:
    """Consumes the arm's events; renders live (terminal) or as log lines."""

    def __init__(
        self, console: Console, arm: str, spec: str, duration_s: float, dashboard: bool
    ) -> None:
        self.console = console
        self.arm, self.spec = arm, spec
        self.duration_s = duration_s
        self.enabled = dashboard and console.is_terminal
        self.agents: dict[int, str] = {}
        self.turns: Counter[int] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.started: float | None = None
        self.dashboard: Dashboard | None = None
        self.lines = LogLines(console, every_s=5.0)

    def handle(self, event: Any) -> bool:
        """Take one event; True when it came from the monitor (and belongs in the timeline)."""
        if isinstance(event, AgentState):
            self.agents[event.agent] = event.state
            return False
        if isinstance(event, TurnFinished):
            rec = event.record
            self.outcomes[rec.outcome] += 1
            if rec.outcome == "ok":
                self.turns[rec.agent] += 1
            elif not self.enabled and rec.outcome != "aborted":
                self.console.print(
                    f"[{rec.t_end:8.1f}s] agent {rec.agent} turn {rec.turn}: {rec.outcome} {rec.error or ''}",
                    markup=False,
                    highlight=False,
                )
            return False
        if isinstance(event, RunFinished):
            return False
        if self.dashboard is not None:
            self.dashboard.update(event)
        else:
            self.lines.handle(event)
        return True

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

    def _progress_panel(self) -> RenderableType:
        elapsed = 0.0 if self.started is None else time.monotonic() - self.started
        total = max(self.duration_s, 1e-9)
        bar = ProgressBar(total=total, completed=min(elapsed, total), width=50)
        return Group(bar, Text(f"{fmt_s(elapsed)} of {fmt_s(self.duration_s)} (wall)", style="dim"))

    @contextlib.asynccontextmanager
    async def live(self, url: str) -> AsyncIterator[None]:
        """Show the live view (or nothing extra in log-line mode) while the block runs."""
        self.started = time.monotonic()
        if not self.enabled:
            yield
            return
        self.dashboard = Dashboard(url, extra_panels=[self._agents_panel, self._progress_panel])
        try:
            async with live_dashboard(self.dashboard, self.console):
                yield
        finally:
            self.dashboard = None
