"""How to serve one simulated engine: `ServeOptions`, and the help of the flags that set it.

Both command lines that serve the simulator (`python -m stallkit.engine.serve`, and `kit sim serve` on top
of it) take each flag's help and default from here, so the texts are written once. Light to
import (pydantic and the simulator's config, not the HTTP server), so a command line's help
does not load the server.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.names import DialectName
from stallkit.engine.errors import EngineError
from stallkit.engine.sim.config import Fault, SimConfig

LogLevel = Literal["debug", "info", "warning", "error"]
#: the log levels, in order, for a command line's choices
LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)

#: the scheduler policies, for a command line's choices
POLICIES: tuple[str, ...] = get_args(SimConfig.model_fields["policy"].annotation)
#: help of --config, which names a TOML file of `SimConfig` fields
CONFIG_HELP = "TOML file of the simulator's settings (SimConfig fields)."
#: help of --fault KIND@S
FAULT_HELP = (
    "Play a stall from engine second S (fault injection): freeze (frozen), block (a request "
    "longer than the KV pool heads the queue: blocked), thrash (every request preempted before "
    "its next token: thrashing), busy_hang (no step, GPUs busy), dead_core (the core dies "
    "behind a live API: its series leave /metrics), hidden_freeze (frozen, its running and "
    "waiting gauges read 0: only the clients see the stall)."
)


def policy_help() -> str:
    """Help of --policy: the config's field, and which default wins."""
    policy = SimConfig.model_fields["policy"]
    return f"{policy.description} Default: the --config file's, else {policy.default}."


class ServeOptions(BaseModel):
    """How to serve one simulated engine."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: SimConfig = Field(default_factory=SimConfig, description="The engine's configuration.")
    host: str = Field("127.0.0.1", min_length=1, description="Address to bind.")
    port: int = Field(0, ge=0, le=65535, description="Port to bind; 0 picks a free one.")
    time_scale: float = Field(1.0, gt=0, description="Engine seconds per wall second.")
    freeze_at_s: float | None = Field(
        None,
        ge=0,
        description="Engine time at which the engine stops stepping for good (the fault `freeze`).",
    )
    fail_metrics_at_s: float | None = Field(
        None, ge=0, description="Engine time from which /metrics answers 503."
    )
    log_level: LogLevel = Field("info", description="Level of the engine's log lines.")
    dialect: DialectName = Field(
        "vllm",
        description="The metric dialect /metrics speaks: vllm, or another engine's names "
        "(sglang, llamacpp, tgi) for the signals a stall monitor reads.",
    )
    core: str = Field(
        "sim",
        min_length=1,
        description="The engine core: `sim` (the simulator) or a twin spec (twin:stock, "
        "twin:patched:base, twin:patched:fix, twin:MODULE:CLASS: vLLM's own scheduler, sized "
        "by the config's max_num_seqs, num_blocks, block_size, max_num_batched_tokens and "
        "max_model_len; needs vLLM).",
    )
    calibration: str = Field(
        "seed-gpu-tp2",
        min_length=1,
        description="The twin's step cost: a shipped calibration or a `kit engine calibrate` file.",
    )
    kv_transfer_config: str | None = Field(
        None,
        min_length=1,
        description="vLLM's --kv-transfer-config JSON for a twin core (OffloadingConnector or "
        "SimpleCPUOffloadConnector); its host tier holds the config's host_tier_blocks blocks.",
    )

    def sim_config(self) -> SimConfig:
        """The engine's config, with `freeze_at_s` as its fault."""
        if self.freeze_at_s is None:
            return self.config
        if self.config.fault is not None:
            raise EngineError(
                "--freeze-at and a fault in the config both set a fault", "keep one of them"
            )
        fault = Fault(kind="freeze", at_s=self.freeze_at_s)
        return self.config.model_copy(update={"fault": fault})
