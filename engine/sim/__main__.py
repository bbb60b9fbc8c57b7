"""`python -m engine.sim`: serve the simulated engine and print the URL it listens on.

This is the one command line for serving the simulator: `kit sim serve` runs the same parser
and `main` under its own name. Each option's help and default is its `ServeOptions` field's.
The launcher of the kit reads the line `stallkit-sim listening on http://HOST:PORT` from
stdout (flushed at once); engine log lines go to stderr. A bad option or config is one line
on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn, get_args

from engine.errors import EngineError

PROG = "python -m engine.sim"


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line with a hint, exit 2 (not a usage block)."""

    #: ServeOptions fields -> the flags that set them, to blame a bad value on its flag
    flags: dict[str, str]

    def error(self, message: str) -> NoReturn:
        _fail(message, f"see `{self.prog} --help`")


def _fail(message: str, hint: str) -> NoReturn:
    print(f"error: {message} (hint: {hint})", file=sys.stderr, flush=True)
    raise SystemExit(2)


def parser(prog: str = PROG) -> _Parser:
    """The options of a served simulator, described by the `ServeOptions` fields they set."""
    from engine.sim.config import SimConfig
    from engine.sim.serve import ServeOptions

    fields = ServeOptions.model_fields
    p = _Parser(prog=prog, description="Serve the simulated vLLM-style engine.")
    p.flags = {}

    def option(flag: str, name: str, note: str = "", **kwargs: Any) -> None:
        p.flags[name] = flag
        text = f"{fields[name].description} {note}".strip()
        default = fields[name].default
        shown = f" (default: {default})" if default is not None else ""
        p.add_argument(flag, default=default, help=text + shown, **kwargs)

    policy = SimConfig.model_fields["policy"]
    p.add_argument(
        "--policy",
        choices=get_args(policy.annotation),
        default=None,
        help=f"{policy.description} Default: the config's, else {policy.default}.",
    )
    option("--host", "host")
    option("--port", "port", type=int)
    option("--time-scale", "time_scale", type=float, metavar="X")
    p.add_argument(
        "--config", type=Path, default=None, metavar="FILE", help="TOML file of SimConfig fields."
    )
    option("--freeze-at", "freeze_at_s", "(fault injection)", type=float, metavar="S")
    option("--fail-metrics-at", "fail_metrics_at_s", "(fault injection)", type=float, metavar="S")
    p.add_argument(
        "--fault",
        default=None,
        metavar="KIND@S",
        help="Play a stall from engine second S (fault injection): freeze (frozen), block (a "
        "request longer than the KV pool heads the queue: blocked), thrash (every request "
        "preempted before its next token: thrashing), busy_hang (no step, GPUs busy), "
        "dead_core (the core dies behind a live API: its series leave /metrics).",
    )
    option("--log-level", "log_level", choices=get_args(fields["log_level"].annotation))
    option("--core", "core", metavar="SPEC")
    option("--calibration", "calibration", "(twin cores)", metavar="NAME|FILE")
    return p


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Parse `argv`, serve until interrupted; the exit code (2 for any user error)."""
    try:
        p = parser(prog)
        return _serve(p.parse_args(argv), p)
    except SystemExit as exc:  # --help (0) and the one-line usage errors (2)
        return exc.code if isinstance(exc.code, int) else 2


def _serve(args: argparse.Namespace, p: _Parser) -> int:
    from pydantic import ValidationError

    from contract.errors import validation_message
    from engine.sim.faults import parse_fault
    from engine.sim.serve import ServeOptions, configure_logging, load_sim_config, serve

    try:
        config = load_sim_config(args.config, args.policy)
        if args.fault is not None:
            config = config.model_copy(update={"fault": parse_fault(args.fault)})
        opts = ServeOptions(
            config=config,
            host=args.host,
            port=args.port,
            time_scale=args.time_scale,
            freeze_at_s=args.freeze_at,
            fail_metrics_at_s=args.fail_metrics_at,
            log_level=args.log_level,
            core=args.core,
            calibration=args.calibration,
        )
    except EngineError as exc:
        _fail(str(exc), exc.hint)
    except ValidationError as exc:
        message = validation_message(exc, names=p.flags)
        _fail(f"invalid option {message}", f"see `{p.prog} --help`")
    configure_logging(opts.log_level)

    def ready(url: str) -> None:
        print(f"stallkit-sim listening on {url}", flush=True)

    try:
        serve(opts, ready)
    except EngineError as exc:
        _fail(str(exc), exc.hint)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
