"""`kit backtest`: the stall detector replayed over a fleet's history; how often has it happened?

Thin: parse the flags (the range, the step, the engines, the monitor's rule flags), replay
(`stallkit.monitor.backtest.sources`: Prometheus's `query_range`, or a file), write the run directory
(`stalls.jsonl`, `backtest.json`, `backtest.html`) and print each stalled engine and the
fleet's rate. Exit 0 whatever was found; 2 on bad input or an unreachable server.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stallkit.kits.cli.common import ctrl_c, fail, interrupted, user_errors
from stallkit.kits.cli.fields import field_option, flags_by_field
from stallkit.kits.cli.fleet import DialectOpt, GpuSelectorOpt, GroupByOpt, SelectorOpt
from stallkit.monitor import MonitorConfig, monitor_config

if TYPE_CHECKING:
    from stallkit.monitor import BacktestTally, FleetQuery

BACKTEST_HELP = (
    "Replay the stall detector over a fleet's history: every stall per engine (kind, onset, "
    "duration, what the engine showed) and the stall rate per engine-hour.\n\n"
    "From a Prometheus (--prometheus URL, --from/--to, query_range split into windows of at "
    "most 11,000 points), or from a file (--from-file): OpenMetrics text with a timestamp on "
    "every sample, or a run's timeline.jsonl. Writes stalls.jsonl, backtest.json and "
    "backtest.html into --out."
)


@user_errors
def backtest(
    ctx: typer.Context,
    prometheus: Annotated[
        str | None, typer.Option("--prometheus", metavar="URL", help="The Prometheus to read.")
    ] = None,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file",
            help="Replay a file instead: OpenMetrics text with timestamps, or a timeline.jsonl.",
        ),
    ] = None,
    selector: SelectorOpt = "",
    group_by: GroupByOpt = "instance",
    gpu_selector: GpuSelectorOpt = "",
    dialect: DialectOpt = None,
    no_gpu: Annotated[
        bool, typer.Option("--no-gpu", help="Judge on engine metrics alone (no DCGM series).")
    ] = False,
    start: Annotated[
        str | None,
        typer.Option("--from", help="Start: RFC 3339, Unix seconds, or now-6h (Prometheus)."),
    ] = None,
    end: Annotated[str, typer.Option("--to", help="End, as --from.")] = "now",
    step: Annotated[
        str, typer.Option(help="Range query step (15s, 1m): at most the scrape interval.")
    ] = "15s",
    stall_after: float = field_option(MonitorConfig, "stall_after_s", "--stall-after"),
    idle_gpu: float = field_option(MonitorConfig, "idle_gpu_perc", "--idle-gpu"),
    gpu_window: float = field_option(MonitorConfig, "gpu_window_s", "--gpu-window"),
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Run directory for the report (default ./kit-runs/<time>-backtest)."
        ),
    ] = None,
) -> None:
    """Replay the stall detector over a fleet's history."""
    import time

    from stallkit.kits.cli.fleet import FleetArgs, fleet_query
    from stallkit.monitor import parse_duration, parse_time

    if (prometheus is None) == (from_file is None):
        raise fail("give either --prometheus URL or --from-file PATH", "see `kit backtest --help`")
    step_s = parse_duration(step)
    config = monitor_config(
        names=flags_by_field(ctx, MonitorConfig),
        interval_s=step_s,
        stall_after_s=stall_after,
        stop_after_s=None,
        idle_gpu_perc=idle_gpu,
        gpu_window_s=gpu_window,
    )
    fleet = FleetArgs(prometheus or "", selector, group_by, gpu_selector, not no_gpu, dialect)
    query = fleet_query(fleet)
    out_dir = out or Path("kit-runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-backtest"
    began = time.monotonic()
    if from_file is not None:
        tally, t_start, t_end = _from_file(from_file, query, config)
        source, used_step = str(from_file), None
    else:
        assert prometheus is not None
        if start is None:
            raise fail("--prometheus needs --from", "e.g. --from now-24h, or RFC 3339")
        now = time.time()
        t_start, t_end = parse_time(start, now), parse_time(end, now, "--to")
        if t_end <= t_start:
            raise fail("--to is not after --from", "give a range that moves forward")
        tally = _from_prometheus(prometheus.strip(), query, config, t_start, t_end, step_s)
        source, used_step = prometheus.strip(), step_s
    _write(
        out_dir, tally, query, source, t_start, t_end, used_step, config, time.monotonic() - began
    )


def _from_file(
    path: Path, query: FleetQuery, config: MonitorConfig
) -> tuple[BacktestTally, float, float]:
    from stallkit.monitor import FleetQuery, backtest_openmetrics, history_text

    if path.suffix == ".jsonl":
        query = FleetQuery(group_by="instance", gpu=query.gpu)  # the converted file's label
    return backtest_openmetrics(history_text(path), query, config)


def _from_prometheus(
    url: str, query: FleetQuery, config: MonitorConfig, start: float, end: float, step_s: float
) -> BacktestTally:
    import asyncio

    from stallkit.kits.cli.common import err_console
    from stallkit.monitor import PrometheusClient, backtest_prometheus

    def progress(done: int, total: int) -> None:
        err_console.print(f"backtest: {done}/{total} engines replayed", highlight=False)

    async def main() -> BacktestTally:
        client = PrometheusClient(url, timeout_s=60.0)
        try:
            return await backtest_prometheus(
                client, query, config, start, end, step_s, progress=progress
            )
        finally:
            await client.aclose()

    with ctrl_c():
        return asyncio.run(main())
    raise interrupted("interrupted")


def _write(
    out_dir: Path,
    tally: BacktestTally,
    query: FleetQuery,
    source: str,
    start: float,
    end: float,
    step_s: float | None,
    config: MonitorConfig,
    wall_s: float,
) -> None:
    from stallkit.contract.fleet import BACKTEST_FILE, STALLS_FILE
    from stallkit.contract.jsonl import jsonl_text, write_json
    from stallkit.monitor import backtest_file
    from stallkit.reports import write_backtest_html

    report = backtest_file(
        tally, source=source, selector=query.selector, group_by=query.group_by, start=start,
        end=end, step_s=step_s, stall_after_s=config.stall_after_s, wall_s=wall_s,
    )  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / STALLS_FILE).write_text(jsonl_text(tally.stalls(end)), encoding="utf-8")
    write_json(out_dir / BACKTEST_FILE, report)
    html = write_backtest_html(out_dir)
    for engine in report.engines:
        if engine.stalls:
            print(f"{engine.engine}: {engine.stalls} stall(s), {engine.stalled_s:.0f} s stalled")
    rate = report.stalls_per_engine_hour
    print(
        f"backtest: {len(report.engines)} engine(s), {report.engine_hours:.3g} engine-hours, "
        f"{report.stalls} stall(s)"
        + (f", {rate:.3g} per engine-hour" if rate is not None else "")
        + f"; {html}",
        flush=True,
    )


def register(app: typer.Typer) -> None:
    """Add `kit backtest` to the top-level app."""
    app.command("backtest", help=BACKTEST_HELP)(backtest)
