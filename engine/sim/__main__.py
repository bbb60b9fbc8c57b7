"""`python -m engine.sim`: serve the simulated engine and print the URL it listens on.

The launcher of the kit reads the line `stallkit-sim listening on http://HOST:PORT` from
stdout (flushed at once); engine log lines go to stderr. A bad config is one line on stderr
and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.errors import EngineError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine.sim", description="Serve the simulated vLLM-style engine."
    )
    parser.add_argument(
        "--policy",
        choices=["base", "fix"],
        default=None,
        help="scheduler policy (default: the config's, else base)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--port", type=int, default=0, help="port to bind (0 = any free port)")
    parser.add_argument(
        "--time-scale", type=float, default=1.0, help="engine seconds per wall second"
    )
    parser.add_argument("--config", type=Path, default=None, help="TOML file of SimConfig fields")
    parser.add_argument(
        "--freeze-at",
        type=float,
        default=None,
        metavar="S",
        help="freeze the engine at engine time S (fault injection)",
    )
    parser.add_argument(
        "--fail-metrics-at",
        type=float,
        default=None,
        metavar="S",
        help="/metrics answers 503 from engine time S (fault injection)",
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default="info",
        help="engine log level",
    )
    return parser  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from pydantic import ValidationError

    from contract.errors import validation_message
    from engine.sim.serve import ServeOptions, configure_logging, load_sim_config, serve

    try:
        opts = ServeOptions(
            config=load_sim_config(args.config, args.policy),
            host=args.host,
            port=args.port,
            time_scale=args.time_scale,
            freeze_at_s=args.freeze_at,
            fail_metrics_at_s=args.fail_metrics_at,
            log_level=args.log_level,
        )
    except EngineError as exc:
        print(f"error: {exc} (hint: {exc.hint})", file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(f"error: invalid option {validation_message(exc)}", file=sys.stderr)
        return 2
    configure_logging(opts.log_level)

    def ready(url: str) -> None:
        print(f"stallkit-sim listening on {url}", flush=True)

    try:
        serve(opts, ready)
    except EngineError as exc:
        print(f"error: {exc} (hint: {exc.hint})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
