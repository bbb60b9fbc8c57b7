"""`kit monitor`: attach to a running engine, show it live, record its timeline, catch stalls.

Thin: parse flags, build a validated `MonitorConfig` and GPU source, run the monitor, map
the outcome to an exit code (0 fine, Ctrl-C included: the documented way to stop it, with the
same summary; 2 user error such as an unreachable URL; 3 a stall started under
`--exit-on-stall`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stallkit.contract.errors import StallkitError
from stallkit.contract.files import discard_if_unrecorded, outermost_missing
from stallkit.kits.cli.alerting import (
    MetricsHostOpt,
    MetricsPortOpt,
    OnStallEndOpt,
    OnStallOpt,
    OnStallTimeoutOpt,
    start_alerting,
)
from stallkit.kits.cli.common import ctrl_c, fail, user_errors
from stallkit.kits.cli.fields import field_option, flags_by_field
from stallkit.kits.cli.fleet import (
    DialectOpt,
    GpuSelectorOpt,
    GroupByOpt,
    PendingQueryOpt,
    PrometheusOpt,
    SelectorOpt,
)
from stallkit.monitor import MonitorConfig, monitor_config

if TYPE_CHECKING:
    from stallkit.contract.gpu import GpuSource
    from stallkit.kits.arm.alerting import ArmAlerting
    from stallkit.monitor import Dialect, GpuReader, MonitorOutcome

#: Exit code of `kit monitor --exit-on-stall` when a stall starts.
EXIT_STALL = 3

MONITOR_HELP = (
    "Attach to a running engine: live metrics, GPU utilisation and stall detection.\n\n"
    "Watches the engine's /metrics (vLLM, the scheduler fork, the simulator, SGLang, llama.cpp's "
    "server or TGI: the metric dialect is told apart from the page, or set with --dialect), writes "
    "every sample and stall to timeline.jsonl, and with --exit-on-stall acts as a watchdog "
    "for scripts and CI (exit 3 when a stall starts; 2 when the engine is unreachable).\n\n"
    "With --prometheus URL instead of an engine URL it watches every engine behind "
    "--selector through that Prometheus (one detector per --group-by value), writing "
    "fleet.jsonl.\n\n"
    "Alone, the monitor sees only what the engine's page says: an engine wedged with its "
    "running and waiting gauges at 0 reads as idle, since no client's waiting shows there. "
    "`kit run` and `kit ab` count their own agents' requests in flight and catch it; for a "
    "fleet, --pending-query joins a gateway's or frontend's in-flight series to each engine. "
    "An engine frozen whole (a stopped process: its port still accepts connections, its page "
    "never answers) after a page with work pending reads as a frozen stall; one that refuses "
    "connections is down."
)


@user_errors
def monitor(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Argument(help="Engine base URL, e.g. http://127.0.0.1:8000 (not with --prometheus)."),
    ] = None,
    interval: float = field_option(MonitorConfig, "interval_s", "--interval"),
    gpu_source: Annotated[
        str,
        typer.Option(
            help="GPU utilisation source: auto | nvml:0,1 | smi:0,1 | dcgm:URL | none "
            "(auto: the engine's own DCGM page when it serves one, else none; "
            "none: the stall rule runs on metrics alone).",
        ),
    ] = "auto",
    stall_after: float = field_option(MonitorConfig, "stall_after_s", "--stall-after"),
    stop_after: float = field_option(
        MonitorConfig,
        "stop_after_s",
        "--stop-after",
        note="0: never. `kit monitor` logs the request and keeps watching.",
    ),
    idle_gpu: float = field_option(MonitorConfig, "idle_gpu_perc", "--idle-gpu"),
    gpu_window: float = field_option(MonitorConfig, "gpu_window_s", "--gpu-window"),
    duration: Annotated[
        float | None,
        typer.Option(
            help="Stop after this many wall seconds; unset: at Ctrl-C (or at the first stall, "
            "with --exit-on-stall)."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Run directory for timeline.jsonl (default ./kit-runs/<time>-monitor).",
        ),
    ] = None,
    no_dashboard: Annotated[
        bool, typer.Option("--no-dashboard", help="Plain log lines instead of the live view.")
    ] = False,
    exit_on_stall: Annotated[
        bool,
        typer.Option("--exit-on-stall", help=f"Exit with code {EXIT_STALL} when a stall starts."),
    ] = False,
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = "127.0.0.1",
    on_stall: OnStallOpt = None,
    on_stall_end: OnStallEndOpt = False,
    on_stall_timeout: OnStallTimeoutOpt = 60.0,
    prometheus: PrometheusOpt = None,
    selector: SelectorOpt = "",
    group_by: GroupByOpt = "instance",
    gpu_selector: GpuSelectorOpt = "",
    dialect: DialectOpt = None,
    pending_query: PendingQueryOpt = None,
) -> None:
    """Attach to a running engine: live metrics, GPU utilisation and stall detection."""
    config = monitor_config(
        names=flags_by_field(ctx, MonitorConfig),
        interval_s=interval,
        stall_after_s=stall_after,
        stop_after_s=stop_after or None,
        idle_gpu_perc=idle_gpu,
        gpu_window_s=gpu_window,
        scrape_timeout_s=max(min(5.0, interval * 5), 0.5),
    )
    alerts = (metrics_port, metrics_host, on_stall, on_stall_end, on_stall_timeout)
    if pending_query is not None and prometheus is None:
        raise fail("--pending-query reads Prometheus", "give --prometheus URL with it")
    if prometheus is not None or url is None:
        from stallkit.kits.cli.fleet import FleetArgs, monitor_fleet

        fleet = FleetArgs(
            prometheus or "",
            selector,
            group_by,
            gpu_selector,
            gpu_source != "none",
            dialect,
            pending_query,
        )
        monitor_fleet(url, fleet, config, out, duration, no_dashboard, exit_on_stall, alerts)
        return
    view = (duration, no_dashboard, exit_on_stall)
    _monitor_one(url.strip(), dialect, gpu_source, config, out, view, alerts)


def _monitor_one(
    url: str,
    dialect: str | None,
    gpu_source: str,
    config: MonitorConfig,
    out: Path | None,
    view: tuple[float | None, bool, bool],
    alerts: tuple[int | None, str, str | None, bool, float],
) -> None:
    """`kit monitor URL`: one engine watched, its timeline written, the outcome reported
    (`view`: the duration, no dashboard, exit on stall)."""
    import time

    from stallkit.contract.gpu import GpuSource
    from stallkit.contract.urls import URL_HINT, url_problem
    from stallkit.monitor import gpu_source as make_gpu_source

    duration, no_dashboard, exit_on_stall = view
    problem = url_problem(url)
    if problem is not None:
        raise fail(f"bad URL {url!r}: {problem}", URL_HINT)
    spoken = _dialect(url, dialect, config.scrape_timeout_s)
    gpu = make_gpu_source(_resolved_gpu_source(url, GpuSource.parse(gpu_source)))
    out_dir = out or Path("kit-runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-monitor"
    made = outermost_missing(out_dir)
    alerting = start_alerting(*alerts)
    hooks = alerting.for_url(url, out_dir, config.stall_after_s)
    try:
        try:
            outcome = _watch(
                url, config, gpu, out_dir, duration, no_dashboard, exit_on_stall, hooks, spoken
            )
        finally:
            hooks.close()
            alerting.close()
    except StallkitError:
        if made is not None:  # a monitor that could not start leaves no empty directory behind
            discard_if_unrecorded(out_dir, made)
        raise
    _report(outcome)


def _watch(
    url: str,
    config: MonitorConfig,
    gpu: GpuReader,
    out_dir: Path,
    duration: float | None,
    no_dashboard: bool,
    exit_on_stall: bool,
    hooks: ArmAlerting,
    dialect: Dialect,
) -> MonitorOutcome:
    """Run the monitor in the foreground until its end. Ctrl-C (and SIGTERM, as Ctrl-C:
    `stallkit.kits.cli.common.sigterm_as_ctrl_c`) is the way to stop it: what it saw so far
    is the outcome, marked `stopped`."""
    import asyncio
    import sys

    from rich.console import Console

    from stallkit.contract.files import TIMELINE_FILE
    from stallkit.monitor import MonitorOutcome, run_monitor

    live = not no_dashboard and sys.stdout.isatty()
    tally = MonitorOutcome(timeline=out_dir / TIMELINE_FILE)  # what it saw, should it be stopped

    async def until_stopped() -> MonitorOutcome:
        try:
            return await run_monitor(
                url,
                config,
                gpu,
                out_dir=out_dir,
                duration_s=duration,
                display="live" if live else "lines",
                console=Console(),
                exit_on_stall=exit_on_stall,
                sinks=[hooks, tally],
                dialect=dialect,
            )
        except asyncio.CancelledError:  # asyncio.run's answer to Ctrl-C: the timeline is closed
            tally.stopped = True
            return tally

    with ctrl_c():  # by design: Ctrl-C (or SIGTERM) ends the watch, and the command, normally
        return asyncio.run(until_stopped())
    tally.stopped = True  # a Ctrl-C before the watch began
    return tally


def _report(outcome: MonitorOutcome) -> None:
    """The one summary line (and the stall under --exit-on-stall, with its exit code)."""
    how = "stopped at Ctrl-C: " if outcome.stopped else ""
    print(
        f"monitor: {how}{outcome.samples} samples, {outcome.downs} down, "
        f"{len(outcome.stalls)} stall(s); timeline {outcome.timeline}",
        flush=True,
    )
    if outcome.exited_on_stall:
        first = outcome.stalls[0]
        print(f"stall: {first.kind}, onset t={first.onset:.1f}s", flush=True)
        raise typer.Exit(EXIT_STALL)


def _dialect(url: str, name: str | None, timeout_s: float) -> Dialect:
    """The engine's metric dialect (named, or its page's); say on stderr which stall kinds
    its page cannot show and why."""
    import asyncio

    from stallkit.kits.cli.common import err_console
    from stallkit.monitor import resolve_dialect

    dialect = asyncio.run(resolve_dialect(url, name, timeout_s=timeout_s))
    missing = dialect.unavailable()
    if missing:
        why = "; ".join(f"{kind}: {reason}" for kind, reason in missing.items())
        # wrapped between words at the terminal's width (soft wrap leaves the terminal to cut
        # a word in two)
        err_console.print(
            f"metrics: {dialect.engine} ({dialect.name}); not available: {why}", highlight=False
        )
    return dialect


def _resolved_gpu_source(url: str, asked: GpuSource) -> GpuSource:
    """The source `--gpu-source` names, `auto` resolved as a run's arms resolve it (no
    launcher: the engine is asked for its DCGM page); say on stderr what auto chose and why."""
    from stallkit.kits.cli.common import err_console
    from stallkit.monitor import resolve_gpu_source

    chosen, why = resolve_gpu_source(asked, url)
    if why and chosen.kind == "none":
        why += "; pass --gpu-source nvml:0,1, smi:0,1 or dcgm:URL for GPU readings"
    if why:
        err_console.print(f"gpu source: {chosen} (auto: {why})", highlight=False)
    return chosen


def register(app: typer.Typer) -> None:
    """Add `kit monitor` to the top-level app."""
    # bare `kit monitor` is the one-line "no engine URL" error, not the whole help
    app.command("monitor", help=MONITOR_HELP)(monitor)
