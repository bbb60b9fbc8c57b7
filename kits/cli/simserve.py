"""`kit sim serve`: serve the simulated engine over HTTP like vLLM, until interrupted.

A thin command: builds validated `ServeOptions` (a TOML file of `SimConfig` fields plus the
flags), prints the URL it listens on and blocks. `kits.cli.sim` registers it under `kit sim`.
Heavy imports happen inside the command so `kit --help` stays instant.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kits.cli.common import user_errors


class PolicyChoice(StrEnum):
    base = "base"
    fix = "fix"


#: ServeOptions fields -> the flags that set them, to blame a bad value on its flag
_FLAGS = {
    "time_scale": "--time-scale",
    "freeze_at_s": "--freeze-at",
    "fail_metrics_at_s": "--fail-metrics-at",
    "host": "--host",
    "port": "--port",
}


class LogLevelChoice(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


@user_errors
def serve(
    policy: Annotated[
        PolicyChoice | None,
        typer.Option(
            help="Scheduler policy: base (the fork, livelocks) or fix. "
            "Default: the config's, else base."
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="Port to bind; 0 picks a free one.", min=0, max=65535)
    ] = 0,
    time_scale: Annotated[
        float, typer.Option("--time-scale", help="Engine seconds per wall second (e.g. 30).")
    ] = 1.0,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="TOML file of simulator config fields (SimConfig)."),
    ] = None,
    freeze_at: Annotated[
        float | None,
        typer.Option(
            "--freeze-at", metavar="S", help="Freeze the engine at engine time S (fault injection)."
        ),
    ] = None,
    fail_metrics_at: Annotated[
        float | None,
        typer.Option(
            "--fail-metrics-at", metavar="S", help="/metrics answers 503 from engine time S."
        ),
    ] = None,
    log_level: Annotated[
        LogLevelChoice, typer.Option(help="Engine log level.")
    ] = LogLevelChoice.info,
) -> None:
    """Serve the simulated engine like vLLM: chat/completions, /tokenize, /metrics, DCGM."""
    from pydantic import ValidationError

    from contract.errors import validation_message
    from engine.sim.serve import ServeOptions, configure_logging, load_sim_config
    from engine.sim.serve import serve as serve_blocking
    from kits.cli.common import fail

    sim_config = load_sim_config(config, policy.value if policy else None)
    try:
        opts = ServeOptions(
            config=sim_config,
            host=host,
            port=port,
            time_scale=time_scale,
            freeze_at_s=freeze_at,
            fail_metrics_at_s=fail_metrics_at,
            log_level=log_level.value,
        )
    except ValidationError as exc:
        raise fail(
            f"invalid option {validation_message(exc, names=_FLAGS)}",
            "see `kit sim serve --help`",
        ) from None
    configure_logging(opts.log_level)

    def ready(url: str) -> None:
        typer.echo(f"stallkit-sim listening on {url}")

    try:
        serve_blocking(opts, ready)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
