"""`kit monitor`: attach to a running engine, show it live, record its timeline, catch stalls.

Thin: parse flags, build a validated `MonitorConfig` and GPU source, run the monitor, map
the outcome to an exit code (0 fine, 2 user error such as an unreachable URL, 3 a stall
started under `--exit-on-stall`, 130 interrupted).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kits.cli_alerting import (
    MetricsHostOpt,
    MetricsPortOpt,
    OnStallEndOpt,
    OnStallOpt,
    OnStallTimeoutOpt,
    start_alerting,
)
from kits.cli_common import fail, user_errors

if TYPE_CHECKING:
    from contract.gpu import GpuSource

#: Exit code of `kit monitor --exit-on-stall` when a stall starts.
EXIT_STALL = 3

MONITOR_HELP = (
    "Attach to a running engine: live metrics, GPU utilisation and stall detection.\n\n"
    "Watches the engine's /metrics (vLLM, the scheduler fork, or the simulator), writes "
    "every sample and stall to timeline.jsonl, and with --exit-on-stall acts as a watchdog "
    "for scripts and CI (exit 3 when a stall starts; 2 when the engine is unreachable)."
)


@user_errors
def monitor(
    url: Annotated[str, typer.Argument(help="Engine base URL, e.g. http://127.0.0.1:8000.")],
    interval: Annotated[float, typer.Option(help="Seconds between scrapes.")] = 1.0,
    gpu_source: Annotated[
        str,
        typer.Option(
            help="GPU utilisation source: auto | nvml:0,1 | smi:0,1 | dcgm:URL | none "
            "(auto: the engine's own DCGM page when it serves one, else none; "
            "none: the stall rule runs on metrics alone).",
        ),
    ] = "auto",
    stall_after: Annotated[
        float, typer.Option(help="Seconds the stall rule must hold before a stall starts.")
    ] = 60.0,
    stop_after: Annotated[
        float,
        typer.Option(help="Seconds of one stall before a stop is requested (0: never)."),
    ] = 240.0,
    idle_gpu: Annotated[
        float, typer.Option(help="A GPU at or under this utilisation (%) is idle.")
    ] = 5.0,
    gpu_window: Annotated[
        float,
        typer.Option(
            help="Seconds a GPU utilisation reading averages over (DCGM exporters often "
            "sample far less often than NVML); readings this soon after a stall's onset "
            "may still show earlier work.",
        ),
    ] = 1.0,
    duration: Annotated[
        float | None, typer.Option(help="Stop after this many seconds (default: until Ctrl-C).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Run directory for timeline.jsonl (default ./kit-runs/<time>-monitor)."),
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
) -> None:
    """Attach to a running engine: live metrics, GPU utilisation and stall detection."""
    import asyncio
    import sys
    import time

    from rich.console import Console

    from contract.gpu import GpuSource
    from monitor.config import monitor_config
    from monitor.gpu import gpu_source as make_gpu_source
    from monitor.session import run_monitor

    source = GpuSource.parse(gpu_source)

    config = monitor_config(
        interval_s=interval,
        stall_after_s=stall_after,
        stop_after_s=stop_after or None,
        idle_gpu_perc=idle_gpu,
        gpu_window_s=gpu_window,
        scrape_timeout_s=max(min(5.0, interval * 5), 0.5),
    )
    if source.kind == "auto":
        source = _auto_gpu_source(url)
    gpu = make_gpu_source(source)
    out_dir = out or Path("kit-runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-monitor"
    alerting = start_alerting(metrics_port, metrics_host, on_stall, on_stall_end, on_stall_timeout)
    hooks = alerting.for_url(url, out_dir, config.stall_after_s)
    console = Console()
    live = not no_dashboard and sys.stdout.isatty()
    try:
        outcome = asyncio.run(
            run_monitor(
                url,
                config,
                gpu,
                out_dir=out_dir,
                duration_s=duration,
                display="live" if live else "lines",
                console=console,
                exit_on_stall=exit_on_stall,
                sinks=[hooks],
            )
        )
    except KeyboardInterrupt:
        raise fail("interrupted", code=130) from None
    finally:
        hooks.close()
        alerting.close()
    stalls = len(outcome.stalls)
    print(
        f"monitor: {outcome.samples} samples, {outcome.downs} down, {stalls} stall(s); "
        f"timeline {outcome.timeline}",
        flush=True,
    )
    if outcome.exited_on_stall:
        first = outcome.stalls[0]
        print(f"stall: {first.kind}, onset t={first.onset:.1f}s", flush=True)
        raise typer.Exit(EXIT_STALL)


def _auto_gpu_source(url: str) -> GpuSource:
    """Probe the engine for a DCGM page; say on stderr what was chosen and why."""
    from kits.cli_common import err_console
    from monitor.gpu import probe_engine_dcgm

    chosen, why = probe_engine_dcgm(url)
    if why and chosen.kind == "none":
        why += "; pass --gpu-source nvml:0,1, smi:0,1 or dcgm:URL for GPU readings"
    if why:
        err_console.print(f"gpu source: {chosen} (auto: {why})", highlight=False, soft_wrap=True)
    return chosen


def register(app: typer.Typer) -> None:
    """Add `kit monitor` to the top-level app."""
    app.command("monitor", no_args_is_help=True, help=MONITOR_HELP)(monitor)
