"""Views of a load run: live progress from the event stream, and the summary table.

Both only describe: :class:`LoadProgress` folds events into counters and renders them (elapsed
time, outcomes so far, each agent's state); :func:`summary_table` renders a
:class:`~stallkit.contract.summary.LoadSummary`. One rich console (the CLI's) does the writing, and tests
render them into a string.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from stallkit.contract.summary import LoadSummary, Percentiles
from stallkit.loadgen.agents import AgentState, LoadEvent, RunFinished, State, TurnFinished

STATE_STYLES: dict[State, str] = {
    "waiting": "dim",
    "queued": "yellow",
    "streaming": "green",
    "thinking": "cyan",
    "failed": "red",
    "done": "bold",
}
#: Above this many agents the view shows counts per state instead of one cell per agent.
MAX_AGENT_CELLS = 48


@contextlib.contextmanager
def live_progress(progress: LoadProgress, console: Console) -> Iterator[None]:
    """Show `progress` live on `console` while the block runs; its last state stays shown.

    On a terminal rich repaints in place; elsewhere (a pipe, a CI log) it writes the last
    state once at the end, and the newline rich leaves out there is added, so what is printed
    next starts on its own line.
    """
    with Live(progress, console=console, refresh_per_second=4, transient=False):
        yield
    if not console.is_terminal:
        console.line()


class LoadProgress:
    """Live state of a run, updated from its events."""

    def __init__(
        self, agents: int, duration_s: float | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock
        self._start = clock()
        self.duration_s = duration_s
        self.states: list[State] = ["waiting"] * agents
        self.outcomes: Counter[str] = Counter()
        self.finished: RunFinished | None = None

    def update(self, event: LoadEvent) -> None:
        if isinstance(event, AgentState):
            self.states[event.agent] = event.state
        elif isinstance(event, TurnFinished):
            self.outcomes[event.record.outcome] += 1
        else:
            self.finished = event

    def __rich__(self) -> RenderableType:
        elapsed = self._clock() - self._start
        limit = f" / {self.duration_s:.0f} s" if self.duration_s is not None else ""
        head = Text.assemble(
            ("elapsed ", "dim"), f"{elapsed:.1f} s{limit}",
            ("   ok ", "dim"), str(self.outcomes["ok"]),
            ("   timeouts ", "dim"), (str(self.outcomes["timeout"]), "yellow"),
            ("   errors ", "dim"),
            (str(sum(self.outcomes[o] for o in ("http_error", "stream_error", "connect_error"))),
             "red"),
        )  # fmt: skip
        return Group(head, self._agents())

    def _agents(self) -> RenderableType:
        if len(self.states) > MAX_AGENT_CELLS:
            counts = Counter(self.states)
            return Text.assemble(
                *((f"{state} {counts[state]}   ", style) for state, style in STATE_STYLES.items())
            )
        grid = Table.grid(padding=(0, 2))
        columns = 6
        for _ in range(columns):
            grid.add_column()
        cells = [
            Text.assemble((f"{i:>3} ", "dim"), (state, STATE_STYLES[state]))
            for i, state in enumerate(self.states)
        ]
        for row in range(0, len(cells), columns):
            grid.add_row(*cells[row : row + columns])
        return grid


def _ms(p: Percentiles | None) -> str:
    if p is None:
        return "-"
    return f"{p.p50 * 1000:.0f} / {p.p90 * 1000:.0f} / {p.p99 * 1000:.0f} / {p.max * 1000:.0f}"


def summary_table(summary: LoadSummary) -> Table:
    """The run's figures as a two-column table."""
    table = Table(title="load summary", show_header=False, title_justify="left")
    table.add_column(style="dim")
    table.add_column()
    by_kind = ", ".join(f"{k} {v}" for k, v in summary.outcomes.items() if v and k != "ok")
    cache = "-" if summary.cached_prompt_pct is None else f"{summary.cached_prompt_pct:.1f} %"
    rate = "-" if summary.decode_tok_s is None else f"{summary.decode_tok_s:.1f}"
    rows = [
        ("requests", str(summary.requests)),
        ("turns ok", str(summary.turns_ok)),
        ("errors / timeouts / aborted",
         f"{summary.errors} / {summary.timeouts} / {summary.aborted}"),
        ("failures by kind", by_kind or "none"),
        ("TTFT ms p50/p90/p99/max", _ms(summary.ttft_s)),
        ("ITL ms p50/p90/p99/max", _ms(summary.itl_s)),
        ("end-to-end ms p50/p90/p99/max", _ms(summary.e2e_s)),
        ("decode tok/s", rate),
        ("prompt tokens from cache", cache),
        ("prompt size mismatches", str(summary.prompt_size_mismatches)),
        ("span", f"{summary.span_s:.1f} s"),
        ("agents / peak in flight", f"{summary.agents} / {summary.peak_in_flight}"),
    ]  # fmt: skip
    for name, value in rows:
        table.add_row(name, value)
    return table
