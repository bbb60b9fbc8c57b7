"""The flags `kit monitor`, `kit run` and `kit ab` share for when a stall happens.

`--metrics-port` serves the monitor's own `stallkit_*` metrics, `--on-stall CMD` runs a
command with the verdict in its environment; both are checked (port bound, command found)
before anything starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from stallkit.kits.arm.alerting import Alerting

MetricsPortOpt = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        help="Serve stallkit's own metrics (stallkit_*, for Prometheus) on this port (0 = any).",
    ),
]
MetricsHostOpt = Annotated[
    str, typer.Option("--metrics-host", help="Address the metrics port binds.")
]
OnStallOpt = Annotated[
    str | None,
    typer.Option(
        "--on-stall",
        metavar="CMD",
        help="Run CMD (split like a shell, run without one) once when a stall starts; the "
        "verdict is in STALLKIT_* environment variables, its output in on-stall/ of the run.",
    ),
]
OnStallEndOpt = Annotated[
    bool, typer.Option("--on-stall-end", help="Also run the --on-stall command when a stall ends.")
]
OnStallTimeoutOpt = Annotated[
    float, typer.Option("--on-stall-timeout", help="Seconds the --on-stall command may run.")
]


def start_alerting(
    metrics_port: int | None,
    metrics_host: str,
    on_stall: str | None,
    on_stall_end: bool,
    on_stall_timeout: float,
) -> Alerting:
    """Validate the flags and serve the exporter; says where the metrics are."""
    from stallkit.kits.arm.alerting import Alerting

    alerting = Alerting.start(metrics_port, metrics_host, on_stall, on_stall_end, on_stall_timeout)
    if alerting.metrics_url is not None:
        typer.echo(f"stallkit metrics on {alerting.metrics_url}")
    return alerting
