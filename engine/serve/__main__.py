"""`python -m stallkit.engine.serve`: serve the simulated engine and print the URL it listens on.

The engine's own entry point (images and the kit's launcher run it; it needs no `kit`).
`kit sim serve` is the same command in the kit's command line: both declare the same flags
from `stallkit.engine.serve.options` (each option's help and default is its `ServeOptions` field's),
build the options with `serve_options` and serve with `run`. The launcher of the kit reads
the line `stallkit-sim listening on http://HOST:PORT` from stdout (flushed at once); engine
log lines go to stderr. A bad option or config is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from stallkit.engine.errors import EngineError

if TYPE_CHECKING:
    from stallkit.engine.serve.options import ServeOptions

PROG = "python -m stallkit.engine.serve"


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
    from stallkit.engine.serve.options import (
        CONFIG_HELP,
        FAULT_HELP,
        LOG_LEVELS,
        POLICIES,
        ServeOptions,
        policy_help,
    )

    fields = ServeOptions.model_fields
    p = _Parser(prog=prog, description="Serve the simulated vLLM-style engine.")
    p.flags = {}

    def option(flag: str, name: str, note: str = "", **kwargs: Any) -> None:
        p.flags[name] = flag
        text = f"{fields[name].description} {note}".strip()
        default = fields[name].default
        shown = f" (default: {default})" if default is not None else ""
        p.add_argument(flag, default=default, help=text + shown, **kwargs)

    p.add_argument("--policy", choices=POLICIES, default=None, help=policy_help())
    option("--host", "host")
    option("--port", "port", type=int)
    option("--time-scale", "time_scale", type=float, metavar="X")
    p.add_argument("--config", type=Path, default=None, metavar="FILE", help=CONFIG_HELP)
    option("--freeze-at", "freeze_at_s", "(fault injection)", type=float, metavar="S")
    option("--fail-metrics-at", "fail_metrics_at_s", "(fault injection)", type=float, metavar="S")
    p.add_argument("--fault", default=None, metavar="KIND@S", help=FAULT_HELP)
    option("--log-level", "log_level", choices=LOG_LEVELS)
    option("--core", "core", metavar="SPEC")
    option("--calibration", "calibration", "(twin cores)", metavar="NAME|FILE")
    option("--kv-transfer-config", "kv_transfer_config", metavar="JSON")
    option("--dialect", "dialect", metavar="NAME")
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

    from stallkit.contract.errors import validation_message

    try:
        opts = serve_options(
            args.config,
            args.policy,
            args.fault,
            host=args.host,
            port=args.port,
            time_scale=args.time_scale,
            freeze_at_s=args.freeze_at,
            fail_metrics_at_s=args.fail_metrics_at,
            log_level=args.log_level,
            core=args.core,
            calibration=args.calibration,
            kv_transfer_config=args.kv_transfer_config,
            dialect=args.dialect,
        )
        return run(opts)
    except EngineError as exc:
        _fail(str(exc), exc.hint)
    except ValidationError as exc:
        message = validation_message(exc, names=p.flags)
        _fail(f"invalid option {message}", f"see `{p.prog} --help`")


def serve_options(
    config: Path | None, policy: str | None, fault: str | None, **fields: Any
) -> ServeOptions:
    """The options of a served simulator: the `--config` file's settings, `policy` and `fault`
    over them, and the other `ServeOptions` fields. EngineError for a bad file or fault, a
    ValidationError for a bad field (the caller names its flag)."""
    from stallkit.engine.serve.options import ServeOptions
    from stallkit.engine.serve.server import load_sim_config
    from stallkit.engine.sim.faults import parse_fault

    sim = load_sim_config(config, policy)
    if fault is not None:
        sim = sim.model_copy(update={"fault": parse_fault(fault)})
    return ServeOptions(config=sim, **fields)


def run(opts: ServeOptions) -> int:
    """Serve until interrupted, the ready line on stdout once it listens; the exit code (130
    after Ctrl-C). A refusal to start (the port, the core) is an EngineError."""
    from stallkit.engine.serve.server import configure_logging, serve

    configure_logging(opts.log_level)

    def ready(url: str) -> None:
        print(f"stallkit-sim listening on {url}", flush=True)

    try:
        serve(opts, ready)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
