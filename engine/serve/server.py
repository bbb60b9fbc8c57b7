"""Serve the simulated engine over HTTP: options, an in-loop context manager, a blocking entry.

The options are `stallkit.engine.serve.options.ServeOptions` (re-exported here). `running(opts)` binds
the port (0 = any free one), starts uvicorn and the engine driver in the *current* event loop
and yields the base URL, so tests and tools can embed a live simulator; `serve(opts)` is the
blocking form used by `python -m stallkit.engine.serve` and `kit sim serve`. Binds 127.0.0.1 unless told
otherwise. Uvicorn's own logging and access log stay off: the log is the engine's (start-up
line, preemptions at debug, the core's restore warnings).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
import tomllib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import ValidationError

from stallkit.contract.errors import read_text, validation_message
from stallkit.engine.core.protocol import SteppedCore
from stallkit.engine.errors import EngineError
from stallkit.engine.install import VLLM_MISSING
from stallkit.engine.serve.app import build_app
from stallkit.engine.serve.driver import EngineDriver
from stallkit.engine.serve.options import LogLevel as LogLevel
from stallkit.engine.serve.options import ServeOptions as ServeOptions
from stallkit.engine.sim.config import SimConfig

log = logging.getLogger("stallkit.engine.sim")

LOG_FORMAT = "%(levelname)s %(asctime)s [%(name)s] %(message)s"
#: Wall seconds uvicorn waits for open streams (a frozen engine's hang forever) at shutdown.
SHUTDOWN_GRACE_S = 1


def load_sim_config(path: Path | None, policy: str | None = None) -> SimConfig:
    """A `SimConfig` from a TOML file of its fields (or the defaults); `policy` overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(read_text(path, EngineError))
        except OSError as exc:
            raise EngineError(
                f"cannot read simulator config {path}: {exc.strerror or exc}",
                "pass an existing TOML file",
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise EngineError(
                f"simulator config {path} is not valid TOML: {exc}", "fix the file's syntax"
            ) from None
    if policy is not None:
        data["policy"] = policy
    try:
        return SimConfig.model_validate(data)
    except ValidationError as exc:
        where = f" {path}" if path is not None else ""
        raise EngineError(
            f"invalid simulator config{where}: {validation_message(exc)}",
            "see the SimConfig fields (engine/sim/config.py)",
        ) from None


def configure_logging(level: LogLevel) -> None:
    """Engine-style log lines on stderr (for the process entry points, not for embedding)."""
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format=LOG_FORMAT, datefmt="%m-%d %H:%M:%S"
    )
    # The server's own chatter ("Started server process") is not an engine log line.
    logging.getLogger("uvicorn").setLevel(logging.WARNING)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise EngineError(
            f"cannot bind {host}:{port}: {exc.strerror or exc}", "pick another --port (0 = any)"
        ) from None
    sock.setblocking(False)
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    """Uvicorn that ends the engine's open streams as its shutdown begins (a frozen engine's
    streams would otherwise hang until the grace period and be cancelled with a traceback)."""

    def __init__(self, config: uvicorn.Config, driver: EngineDriver) -> None:
        super().__init__(config)
        self.driver = driver

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.driver.stop()
        await super().shutdown(sockets)


def make_core(opts: ServeOptions) -> SteppedCore | None:
    """The twin core that `--core twin:...` names (None: the simulator's own)."""
    if opts.core == "sim":
        if opts.kv_transfer_config is not None:
            raise EngineError(
                "--kv-transfer-config is for a twin core (the simulator's host tier is its "
                "config's host_tier_blocks)",
                "add --core twin:stock (or twin:patched:base|fix), or drop --kv-transfer-config",
            )
        return None
    from stallkit.engine.spec import TwinSpec, parse_spec
    from stallkit.engine.twin.build import vllm_importable
    from stallkit.engine.twin.calibration import load_calibration
    from stallkit.engine.twin.config import check_no_fault, twin_config_for
    from stallkit.engine.twin.core import TwinEngine

    spec = parse_spec(opts.core)
    if not isinstance(spec, TwinSpec):
        raise EngineError(f"--core {opts.core}: not a core", "use sim or a twin: spec")
    if spec.release is not None:
        raise EngineError(
            f"--core {opts.core}: kit serve runs the twin on the installed vLLM only",
            "drop @RELEASE (twin:...), or run the release in kit ab or kit run",
        )
    check_no_fault(f"--core {opts.core}", opts.sim_config().fault, "a fault")
    if not vllm_importable():
        raise EngineError(f"--core {opts.core} needs vLLM, which is not installed", VLLM_MISSING)
    cfg = opts.config
    if spec.scheduler == "patched" and not 0 < cfg.prefill_compute_share < 1:
        raise EngineError(
            f"--core {opts.core}: the plugin needs prefill_compute_share in (0, 1), not "
            f"{cfg.prefill_compute_share:g}",
            "set prefill_compute_share in the --config file",
        )
    sizes: dict[str, int | bool] = {
        name: getattr(cfg, name)
        for name in ("max_num_seqs", "num_blocks", "block_size", "max_num_batched_tokens")
    }
    twin = twin_config_for(
        spec,
        sizes | {"max_model_len": cfg.max_model_len},
        load_calibration(opts.calibration),
        prefill_compute_share=cfg.prefill_compute_share,
        model_name=cfg.model_name,
        num_gpus=cfg.num_gpus,
        **_kv_fields(opts),
    )
    return TwinEngine(twin, log)


def _kv_fields(opts: ServeOptions) -> dict[str, Any]:
    """The twin's connector settings from --kv-transfer-config (none without one): vLLM's
    JSON, checked in one line, and the config's host tier as the connector's."""
    from stallkit.engine.twin.kv import kv_transfer_from_args

    if opts.kv_transfer_config is None:
        return {}
    connector = kv_transfer_from_args(["--kv-transfer-config", opts.kv_transfer_config])
    blocks = opts.config.host_tier_blocks
    return {"kv_transfer_config": connector} | ({"kv_host_blocks": blocks} if blocks else {})


@contextlib.asynccontextmanager
async def _serving(opts: ServeOptions) -> AsyncIterator[tuple[str, asyncio.Task[None]]]:
    logging.getLogger("stallkit.engine.sim").setLevel(opts.log_level.upper())
    driver = EngineDriver(opts.sim_config(), opts.time_scale, log, make_core(opts))
    driver.metrics.dialect = opts.dialect
    app = build_app(driver, opts.fail_metrics_at_s)
    sock = _bind(opts.host, opts.port)
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        timeout_keep_alive=30,
    )
    server = _Server(config, driver)
    driver.start()
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise EngineError("the simulator's HTTP server did not start")
            await asyncio.sleep(0.005)
        url = _url(opts.host, sock.getsockname()[1])
        cfg = opts.config
        if opts.core != "sim":  # the twin's own line (class, sizes) was logged as it started
            log.info("stallkit-sim serving on %s: core %s, calibration %s, time_scale=%g, model=%s",
                     url, opts.core, opts.calibration, opts.time_scale, cfg.model_name)  # fmt: skip
        else:
            log.info(
            "stallkit-sim serving on %s: policy=%s time_scale=%g max_num_seqs=%d num_blocks=%d "
            "block_size=%d max_num_batched_tokens=%d prefill_compute_share=%g "
            "host_tier_blocks=%d restore_max_wait_s=%g num_gpus=%d model=%s",
            url, cfg.policy, opts.time_scale, cfg.max_num_seqs, cfg.num_blocks, cfg.block_size,
            cfg.max_num_batched_tokens, cfg.prefill_compute_share, cfg.host_tier_blocks,
            cfg.restore_max_wait_s, cfg.num_gpus, cfg.model_name,
            )  # fmt: skip
        yield url, task
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await driver.stop()
        sock.close()


@contextlib.asynccontextmanager
async def running(opts: ServeOptions) -> AsyncIterator[str]:
    """Serve in the current event loop while the block runs; yields `http://HOST:PORT`."""
    async with _serving(opts) as (url, _task):
        yield url


async def serve_async(opts: ServeOptions, ready: Callable[[str], None] | None = None) -> None:
    """Serve until the server stops (SIGINT/SIGTERM); `ready(url)` runs once it listens."""
    async with _serving(opts) as (url, task):
        if ready is not None:
            ready(url)
        await asyncio.shield(task)


def serve(opts: ServeOptions, ready: Callable[[str], None] | None = None) -> None:
    """Blocking: serve until interrupted. Uses uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve_async(opts, ready))
    else:
        uvloop.run(serve_async(opts, ready))
