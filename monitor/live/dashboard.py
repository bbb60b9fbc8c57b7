"""The live view: a `Dashboard` state fed from events, rendered with rich; plus plain lines.

`Dashboard.update(event)` only records; `render()` only describes (a renderable), so the
view is tested by rendering into a `StringIO` console. The layout follows the terminal: the
full panels where they fit its height, else a compact one that fits 80x24 (the state banner,
tok/s, running and waiting, KV and GPUs first; the newest events and the callers' compact
panels after). `live_dashboard()` repaints it from its own asyncio task with rich `Live`, so
the scrape loop never waits on the terminal, and rich restores the cursor when the block
exits, Ctrl-C included. `LogLines` is the headless consumer for pipes, CI and
`--no-dashboard`: one line per detector event, state change and every few seconds of samples.
Callers add panels (callables returning a renderable), each with an optional compact form.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.panel import Panel
from rich.rule import Rule
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from stallkit.monitor.detect.events import (
    DetectorState,
    Down,
    GpuReading,
    MonitorEvent,
    Sample,
    StallEnded,
    StallOngoing,
    StallStarted,
    StopRequested,
    Up,
    Verdict,
)
from stallkit.monitor.signals.parse import MetricsSnapshot

SPARK = "▁▂▃▄▅▆▇█"
BANNER_STYLES = {
    "starting": "bold white on grey30",
    "ok": "bold black on green",
    "idle": "bold black on cyan",
    "suspect": "bold black on yellow",
    "stalled": "bold white on red",
    "down": "bold white on magenta",
}
#: the sparkline's widest
SPARK_WIDTH = 48
#: events the compact layout shows (the newest)
COMPACT_EVENTS = 3
#: a caller's panel: called at every repaint
PanelFn = Callable[[], RenderableType]


def fmt_s(seconds: float) -> str:
    """Seconds as `45 s`, `3m05s` or `1h02m`."""
    s = int(seconds)
    if s < 60:
        return f"{seconds:.0f} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def sparkline(values: Sequence[float], width: int = SPARK_WIDTH) -> str:
    """A one-line bar chart of `values` scaled to their maximum, `width` cells at most."""
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        values = [
            max(values[int(i * step) : max(int((i + 1) * step), int(i * step) + 1)])
            for i in range(width)
        ]
    top = max(values)
    if top <= 0:
        return SPARK[0] * len(values)
    last = len(SPARK) - 1
    return "".join(SPARK[min(last, int(v / top * last + 0.5))] for v in values)


def bar(fraction: float, width: int = 24) -> Text:
    """A horizontal bar for a 0..1 fraction, red when nearly full."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    style = "red" if fraction >= 0.95 else "yellow" if fraction >= 0.8 else "green"
    return Text("█" * filled, style=style) + Text("░" * (width - filled), style="grey39")


def banner_text(state: DetectorState, down_error: str | None = None) -> str:
    """The banner's words for a detector state."""
    match state.status:
        case "stalled":
            text = f"STALLED {state.kind} {fmt_s(state.seconds)}"
        case "suspect":
            text = f"SUSPECT {fmt_s(state.seconds)}"
        case "down":
            text = f"DOWN {fmt_s(state.seconds)}" + (f": {down_error}" if down_error else "")
        case status:
            text = status.upper()
    if not state.gpu_checked and state.status in ("suspect", "stalled"):
        text += " (metrics only, no GPU source)"
    return text


class Dashboard:
    """The state a person watching a stall wants, updated from monitor events."""

    def __init__(
        self,
        url: str,
        *,
        history_s: float = 300.0,
        max_events: int = 8,
        extra_panels: Sequence[Callable[[], RenderableType]] = (),
        elapsed: Callable[[], float] | None = None,
    ) -> None:
        self.url = url
        #: the time the header shows (None: the latest event's), so that a caller with a
        #: clock of its own on screen (a run's progress) shows one clock, not two
        self.elapsed = elapsed
        self.history_s = history_s
        #: (panel, its compact form) under the built-in panels
        self.panels: list[tuple[PanelFn, PanelFn]] = [(p, p) for p in extra_panels]
        self.state = DetectorState("starting")
        self._state_t = 0.0  # the time of the event that set `state`
        self.now = 0.0
        self.sample: Sample | None = None
        self.gpu: GpuReading | None = None
        self.down_error: str | None = None
        self.unanswered = False  # the outage under way: connections accepted, no page
        self.rates: deque[tuple[float, float]] = deque()
        self.events: deque[str] = deque(maxlen=max_events)

    def add_panel(self, panel: PanelFn, compact: PanelFn | None = None) -> None:
        """Show `panel()` under the built-in panels at every repaint (`compact()` instead, when
        given, in the compact layout)."""
        self.panels.append((panel, compact or panel))

    def _log(self, t: float, text: str) -> None:
        self.events.append(f"{fmt_s(t):>7}  {text}")

    def update(self, event: MonitorEvent) -> None:
        """Record one event (cheap: called from the scrape loop's consumer)."""
        self.now = max(self.now, event.t)
        match event:
            case Sample():
                self.sample = event
                self.down_error = None
                if event.deltas is not None:
                    self.rates.append((event.t, event.gen_tok_s))
                while self.rates and self.rates[0][0] < event.t - self.history_s:
                    self.rates.popleft()
            case Down():
                if self.down_error is None:
                    self._log(event.t, _event_line(event))
                self.down_error, self.unanswered = event.error, event.unanswered
            case Up():
                self._log(event.t, _up_words(event, self.unanswered))
                self.unanswered = False
            case GpuReading():
                self.gpu = event
            case Verdict():
                self.state, self._state_t = event.state, event.t
            case StallStarted() | StallOngoing() | StopRequested():
                self._follow(event)
            case StallEnded():
                self._log(event.t, f"stall ended ({event.kind}) after {fmt_s(event.duration_s)}")

    def _follow(self, event: StallStarted | StallOngoing | StopRequested) -> None:
        """The banner follows the detector's events as they come, not only the tick's closing
        verdict: a caller that stops at a stop request never hands that verdict on."""
        kind = self.state.kind
        if isinstance(event, StallStarted):
            said = f"; {event.evidence.words()}" if event.evidence else ""
            self._log(event.t, f"stall started ({event.kind}{said}), onset {fmt_s(event.onset)}")
        elif isinstance(event, StopRequested):
            self._log(event.t, f"stop requested after {fmt_s(event.stall_s)} of stall")
        if event.t < self._state_t:
            return  # a newer verdict stands
        if not isinstance(event, StopRequested):
            kind = event.kind
        checked = event.gpu_checked if not isinstance(event, StopRequested) else None
        self._state_t = event.t
        self.state = DetectorState(
            "stalled",
            event.onset,
            event.t - event.onset,
            kind,
            self.state.gpu_checked if checked is None else checked,
        )

    def banner(self) -> Panel:
        """The coloured state banner."""
        text = Text(banner_text(self.state, self.down_error), justify="center")
        return Panel(text, style=BANNER_STYLES[self.state.status])

    def _generation(self, width: int) -> Text:
        """`  227.8 tok/s  ` and the sparkline, in `width` columns at most."""
        rate = self.sample.gen_tok_s if self.sample else 0.0
        spark = sparkline([r for _, r in self.rates], max(0, min(SPARK_WIDTH, width - 18)))
        return Text(f"{rate:9.1f} tok/s  ") + Text(spark, style="cyan")

    def _metrics(self, width: int = 120) -> Table:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        snap = self.sample.snapshot if self.sample else None
        grid.add_row("generation", self._generation(width - 24))
        if snap is None:
            return grid
        waiting = f"{snap.waiting if snap.waiting is not None else '-'}"
        if snap.waiting_capacity is not None:
            waiting += f"  (capacity {snap.waiting_capacity}, deferred {snap.waiting_deferred})"
        grid.add_row("running", str(snap.running if snap.running is not None else "-"))
        grid.add_row("waiting", waiting)
        if snap.kv_usage is not None:
            grid.add_row("KV cache", bar(snap.kv_usage) + Text(f" {snap.kv_usage:6.1%}"))
        if snap.preemptions is not None:
            grid.add_row("preemptions", f"{snap.preemptions:.0f}")
        if snap.prefix_queries and snap.prefix_hits is not None:
            grid.add_row("prefix-cache hits", f"{snap.prefix_hits / snap.prefix_queries:.1%}")
        if snap.compute_s is not None:
            parts = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(snap.compute_s.items()))
            grid.add_row("scheduler compute", parts)
        if len(snap.engines) > 1:
            for key, e in snap.engines.items():
                kv = "-" if e.kv_usage is None else f"{e.kv_usage:.0%}"
                row = f"running {e.running}, waiting {e.waiting}, KV {kv}"
                grid.add_row(f"  engine {key}", row)
        return grid

    def _gpus(self) -> RenderableType:
        if self.gpu is None:
            return Text("no GPU source: the stall rule runs on metrics alone", style="dim")
        if self.gpu.error:
            return Text(f"GPU read failed: {self.gpu.error}", style="red")
        grid = Table.grid(padding=(0, 2))
        for index, util in sorted(self.gpu.util.items()):
            grid.add_row(f"GPU {index}", bar(util / 100) + Text(f" {util:5.1f} %"))
        return grid

    def render(self) -> RenderableType:
        """The full layout where it fits the console's height, else the compact one."""
        return _Fitted(self.full, self.compact)

    def _header(self) -> Text:
        now = self.now if self.elapsed is None else self.elapsed()
        return Text.assemble(
            ("engine ", "dim"), (self.url, "bold"), ("   attached ", "dim"), fmt_s(now)
        )

    def stale_s(self) -> float | None:
        """How long ago the engine's panel values were read, when a tick since went without
        a page (None: they are the latest tick's)."""
        if self.sample is None or self.now <= self.sample.t:
            return None
        return self.now - self.sample.t

    def _engine_title(self) -> Text:
        stale = self.stale_s()
        if stale is None:
            return Text("engine")
        return Text("engine ") + Text(f"stale: last read {fmt_s(stale)} ago", style="bold yellow")

    def full(self, width: int = 120) -> RenderableType:
        """Everything, top to bottom: header, banner, metrics, GPUs, events, extra panels."""
        parts: list[RenderableType] = [
            self._header(),
            self.banner(),
            Panel(self._metrics(width), title=self._engine_title(), title_align="left"),
            Panel(self._gpus(), title="GPUs", title_align="left"),
            Panel(Text("\n".join(self.events) or "none yet"), title="events", title_align="left"),
        ]
        parts.extend(panel() for panel, _ in self.panels)
        return Group(*parts)

    def compact(self, width: int = 80) -> RenderableType:
        """For an 80x24 terminal: header, banner, the engine's signals a few to a line, the
        newest events, then the compact panels."""
        events = list(self.events)[-COMPACT_EVENTS:]
        parts: list[RenderableType] = [
            self._header(),
            self.banner(),
            Panel(self._compact_metrics(width - 4), title=self._engine_title(), title_align="left"),
            Rule("events", align="left", style="dim"),
            Text("\n".join(events) or "none yet"),
        ]
        parts.extend(compact() for _, compact in self.panels)
        return Group(*parts)

    def _compact_metrics(self, width: int) -> Table:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        grid.add_row("gen", self._generation(width - 4))
        snap = self.sample.snapshot if self.sample else None
        if snap is not None:
            for label, text in _compact_rows(snap):
                grid.add_row(label, text)
        grid.add_row("GPU", self._compact_gpus())
        return grid

    def _compact_gpus(self) -> Text:
        if self.gpu is None:
            return Text("no GPU source: the stall rule runs on metrics alone", style="dim")
        if self.gpu.error:
            return Text(f"read failed: {self.gpu.error}", style="red")
        text = Text()
        for index, util in sorted(self.gpu.util.items()):
            text += Text(f"{index} ") + bar(util / 100, 8) + Text(f" {util:3.0f} %  ")
        return text


def _compact_rows(snap: MetricsSnapshot) -> list[tuple[str, Text]]:
    """The engine's signals after the generation row, a few to a line."""
    dash = "-"
    queue = f"running {dash if snap.running is None else snap.running}"
    queue += f"   waiting {dash if snap.waiting is None else snap.waiting}"
    if snap.waiting_capacity is not None:
        queue += f" (capacity {snap.waiting_capacity}, deferred {snap.waiting_deferred})"
    if snap.preemptions is not None:
        queue += f"   preemptions {snap.preemptions:.0f}"
    rows = [("queue", Text(queue))]
    kv = Text()
    if snap.kv_usage is not None:
        kv = bar(snap.kv_usage, 16) + Text(f" {snap.kv_usage:6.1%}")
    if snap.prefix_queries and snap.prefix_hits is not None:
        kv += Text(f"   prefix hits {snap.prefix_hits / snap.prefix_queries:.1%}")
    if kv.plain:
        rows.append(("KV", kv))
    if snap.compute_s is not None:
        parts = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(snap.compute_s.items()))
        rows.append(("compute", Text(parts)))
    if len(snap.engines) > 1:
        engines = "; ".join(
            f"{key}: {e.running} running, {e.waiting} waiting"
            + ("" if e.kv_usage is None else f", KV {e.kv_usage:.0%}")
            for key, e in snap.engines.items()
        )
        rows.append(("engines", Text(engines)))
    return rows


class _Fitted:
    """The full layout where it fits the console's height, else the compact one (each drawn
    for the console's width)."""

    def __init__(
        self, full: Callable[[int], RenderableType], compact: Callable[[int], RenderableType]
    ) -> None:
        self.full, self.compact = full, compact

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        lines = console.render_lines(self.full(width), options.update(height=None), pad=False)
        if len(lines) > options.max_height:
            yield self.compact(width)
            return
        for line in lines:
            yield from line
            yield Segment.line()


class View(Protocol):
    """Anything that describes itself as a renderable (a one-engine or a fleet view)."""

    def render(self) -> RenderableType: ...


@contextlib.asynccontextmanager
async def live_dashboard(
    dashboard: View,
    console: Console | None = None,
    *,
    refresh_per_s: float = 4.0,
    transient: bool = False,
) -> AsyncIterator[Live]:
    """Repaint `dashboard` in a rich `Live` from a background task while the block runs."""
    with Live(dashboard.render(), console=console, auto_refresh=False, transient=transient) as live:

        async def repaint() -> None:
            while True:
                live.update(dashboard.render(), refresh=True)
                await asyncio.sleep(1.0 / refresh_per_s)

        task = asyncio.create_task(repaint())
        try:
            yield live
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            live.update(dashboard.render(), refresh=True)


class LogLines:
    """Plain log lines for a non-terminal stdout: events at once, samples every `every_s`."""

    def __init__(self, console: Console, *, every_s: float = 10.0) -> None:
        self.console = console
        self.every_s = every_s
        self._last_line_t: float | None = None
        self._status: str | None = None
        self._gpu: GpuReading | None = None
        self._down: Down | None = None  # the outage under way, by its first failed scrape

    def _print(self, t: float, text: str) -> None:
        self.console.print(f"[{t:8.1f}s] {text}", markup=False, highlight=False, soft_wrap=True)

    def handle(self, event: MonitorEvent) -> None:
        """Print what deserves a line."""
        match event:
            case Sample():
                if self._last_line_t is None or event.t - self._last_line_t >= self.every_s:
                    self._last_line_t = event.t
                    self._print(event.t, self._sample_line(event))
            case GpuReading():
                self._gpu = event
            case Verdict(state=state) if state.status != self._status:
                self._status = state.status
                self._print(event.t, f"state {banner_text(state)}")
            case Down() if self._down is not None:
                pass  # one line per outage, not one per failed scrape
            case Down():
                self._down = event
                self._print(event.t, _event_line(event))
            case Up():
                unanswered = self._down is not None and self._down.unanswered
                self._down = None
                self._print(event.t, _up_words(event, unanswered))
            case StallStarted() | StallEnded() | StopRequested():
                self._print(event.t, _event_line(event))

    def _sample_line(self, sample: Sample) -> str:
        s = sample.snapshot
        line = f"gen {sample.gen_tok_s:.1f} tok/s running {s.running} waiting {s.waiting}"
        if s.waiting_capacity is not None:
            line += f" (capacity {s.waiting_capacity}, deferred {s.waiting_deferred})"
        if s.kv_usage is not None:
            line += f" kv {s.kv_usage:.0%}"
        if s.preemptions is not None:
            line += f" preemptions {s.preemptions:.0f}"
        if self._gpu is not None and self._gpu.util:
            line += " gpu " + " ".join(f"{k}:{v:.0f}%" for k, v in sorted(self._gpu.util.items()))
        return line


def _up_words(event: Up, unanswered: bool) -> str:
    """An outage's end: the page answering again after a frozen spell, or the engine back."""
    back = "page answered again" if unanswered else "up again"
    return f"{back} after {fmt_s(event.down_s)}"


def _event_line(event: Down | StallStarted | StallEnded | StopRequested) -> str:
    match event:
        case Down(unanswered=True):
            return f"no answer: {event.error}"
        case Down():
            return f"down: {event.error}"
        case StallStarted():
            basis = "" if event.gpu_checked else ", metrics only"
            said = f" ({event.evidence.words()})" if event.evidence else ""
            return f"STALL started: {event.kind}{said}, onset t={event.onset:.1f}s{basis}"
        case StallEnded():
            return f"stall ended: {event.kind}, lasted {event.duration_s:.1f} s"
        case StopRequested():
            return f"stop requested after {event.stall_s:.1f} s of stall"
