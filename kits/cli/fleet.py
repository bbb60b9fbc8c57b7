"""`kit monitor --prometheus`: watch a fleet through the Prometheus it already feeds.

Thin: the flags the fleet watch adds to `kit monitor`, checked (selector, group label),
then the watch itself (`stallkit.monitor.fleet.session.run_fleet`) with `fleet.jsonl` in the run
directory, the fleet view or plain lines, and each engine's exporter series and
`--on-stall` runner. Exit codes as `kit monitor`'s: 3 under `--exit-on-stall` when any
engine stalls, 0 when stopped with Ctrl-C (the way to stop it, with the same summary), 2 when
Prometheus does not answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stallkit.kits.cli.common import ctrl_c, fail

if TYPE_CHECKING:
    from collections.abc import Mapping

    from stallkit.kits.arm.alerting import Alerting
    from stallkit.monitor import FleetOutcome, FleetQuery, MonitorConfig, Sink

PrometheusOpt = Annotated[
    str | None,
    typer.Option(
        "--prometheus",
        metavar="URL",
        help="Watch every engine behind --selector through this Prometheus (or Thanos, Mimir, "
        "VictoriaMetrics) instead of one engine's /metrics.",
    ),
]
SelectorOpt = Annotated[
    str,
    typer.Option(
        "--selector", help='PromQL label matchers picking the engines, e.g. {job="vllm"}.'
    ),
]
GroupByOpt = Annotated[
    str,
    typer.Option(
        "--group-by",
        help="The label whose value names one engine (instance, pod, ...); DCGM's GPU series "
        "join their engine on it.",
    ),
]
GpuSelectorOpt = Annotated[
    str,
    typer.Option(
        "--gpu-selector", help="Label matchers picking DCGM's GPU series (with --prometheus)."
    ),
]
DialectOpt = Annotated[
    str | None,
    typer.Option(
        "--dialect",
        metavar="NAME",
        help="The engines' metric dialect: vllm, sglang, llamacpp or tgi. Default: told apart "
        "from each engine's own series (their family prefixes).",
    ),
]
PendingQueryOpt = Annotated[
    str | None,
    typer.Option(
        "--pending-query",
        metavar="PROMQL",
        help="What a gateway or frontend has in flight, per engine (e.g. sum by (instance) "
        "(dynamo_frontend_inflight_requests)): requests its clients wait on count as the "
        "engine's pending work, whatever its own gauges read. A series joins the engine whose "
        "--group-by label value it carries (label_replace a gateway's own label into it); one "
        "without that label is not counted.",
    ),
]
#: Exit code when an engine of the fleet stalls under --exit-on-stall (as `kit monitor`).
EXIT_STALL = 3


@dataclass(frozen=True)
class FleetArgs:
    """The fleet flags as given."""

    prometheus: str
    selector: str
    group_by: str
    gpu_selector: str
    gpu: bool
    dialect: str | None = None
    pending: str | None = None


def fleet_query(args: FleetArgs) -> FleetQuery:
    """The checked query (raises `MonitorError` on a bad selector or label)."""
    from stallkit.monitor import FleetQuery, dialect_named, label_name, matchers

    return FleetQuery(
        selector=matchers(args.selector),
        group_by=label_name(args.group_by),
        gpu_selector=matchers(args.gpu_selector, "--gpu-selector"),
        gpu=args.gpu,
        dialect=None if args.dialect is None else dialect_named(args.dialect),
        pending=(args.pending or "").strip() or None,
    )


def monitor_fleet(
    url: str | None,
    args: FleetArgs,
    config: MonitorConfig,
    out: Path | None,
    duration: float | None,
    no_dashboard: bool,
    exit_on_stall: bool,
    alerts: tuple[int | None, str, str | None, bool, float],
) -> None:
    """Run the fleet watch in the foreground; report; exit as `kit monitor` does. `alerts`:
    the exporter and on-stall flags, as `start_alerting` takes them."""
    import time

    from stallkit.contract.errors import StallkitError
    from stallkit.contract.files import discard_if_unrecorded, outermost_missing
    from stallkit.contract.urls import URL_HINT, url_problem
    from stallkit.kits.cli.alerting import start_alerting

    if url is not None:
        raise fail(f"an engine URL ({url}) and --prometheus", "give one or the other")
    if not args.prometheus:
        raise fail("no engine URL", "give an engine's URL, or --prometheus URL for a fleet")
    url = args.prometheus.strip()
    problem = url_problem(url)
    if problem is not None:
        raise fail(f"bad --prometheus URL {url!r}: {problem}", URL_HINT)
    query = fleet_query(args)  # checked before the metrics port is bound
    alerting = start_alerting(*alerts)
    try:
        out_dir = out or Path("kit-runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-fleet"
        made = outermost_missing(out_dir)
        try:
            outcome = _watch(
                url, query, config, out_dir, duration, no_dashboard, exit_on_stall, alerting
            )
        except (StallkitError, typer.Exit):
            if made is not None:  # a watch that could not start leaves no empty directory
                discard_if_unrecorded(out_dir, made)
            raise
    finally:
        alerting.close()
    _report(outcome, out_dir, exit_on_stall)


def _watch(
    url: str,
    query: FleetQuery,
    config: MonitorConfig,
    out_dir: Path,
    duration: float | None,
    no_dashboard: bool,
    exit_on_stall: bool,
    alerting: Alerting,
) -> FleetOutcome:
    """The watch in the foreground; Ctrl-C stops it, and what it saw so far is the outcome."""
    import asyncio
    import sys

    from rich.console import Console

    from stallkit.monitor import (
        AnyFleetEvent,
        EngineEvent,
        FleetOutcome,
        FleetStart,
        PerEngine,
        PrometheusClient,
        StallStarted,
        run_fleet,
    )

    t0_unix = [0.0]

    def make(engine: str, labels: Mapping[str, str]) -> list[Sink]:
        return alerting.for_fleet_engine(engine, labels, out_dir, t0_unix[0])

    per_engine = PerEngine(make)

    def stop_when(event: AnyFleetEvent) -> bool:
        if isinstance(event, FleetStart):
            t0_unix[0] = event.t0_unix
        return (
            exit_on_stall
            and isinstance(event, EngineEvent)
            and isinstance(event.event, StallStarted)
        )

    live = not no_dashboard and sys.stdout.isatty()
    tally = FleetOutcome()  # what it saw, should it be stopped

    async def main() -> FleetOutcome:
        # a fleet's answer is bigger than one page: at least 10 s, as Prometheus's own default
        client = PrometheusClient(url, timeout_s=max(config.scrape_timeout_s, 10.0))
        try:
            return await run_fleet(
                client, query, config, out_dir=out_dir, duration_s=duration,
                display="live" if live else "lines", console=Console(),
                sinks=[per_engine, tally], stop_when=stop_when,
            )  # fmt: skip
        except asyncio.CancelledError:  # asyncio.run's answer to Ctrl-C: fleet.jsonl is closed
            return tally
        finally:
            await client.aclose()
            per_engine.close()

    with ctrl_c():  # by design: Ctrl-C (or SIGTERM) ends the watch, and the command, normally
        return asyncio.run(main())
    return tally  # a Ctrl-C before the watch began


def _report(outcome: FleetOutcome, out_dir: Path, exit_on_stall: bool) -> None:
    """The summary lines: each stalled engine with its kinds; exit 3 on a stall if asked."""
    from stallkit.contract.fleet import FLEET_FILE

    stalled = outcome.stalled_engines()
    print(
        f"fleet: {len(outcome.engines)} engine(s), {outcome.samples} samples, "
        f"{outcome.failed_queries} failed queries, {len(outcome.stalls)} stall(s) on "
        f"{len(stalled)} engine(s); {out_dir / FLEET_FILE}",
        flush=True,
    )
    for engine, kinds in sorted(stalled.items()):
        print(f"stalled: {engine} ({', '.join(sorted(kinds))})", flush=True)
    if exit_on_stall and stalled:
        raise typer.Exit(EXIT_STALL)
