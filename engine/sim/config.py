"""Validated configuration of the simulated engine: scheduler sizes, policy and cost model.

`SimConfig()` gives the restore-stall sizes (4 running slots, 319 KV blocks of 896 tokens, a
host tier, compute share 0.4), on which the `base` policy livelocks under sustained load and the
`fix` policy does not. Kits load it from TOML through `SimConfig.model_validate(dict)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from stallkit.engine.policy.controller import Policy


class CostModel(BaseModel):
    """Engine seconds a step takes, from the work it schedules.

    A non-empty step costs `step_overhead_s`, plus prefill tokens (with a context term, so
    long-context prefill is slower), plus decode (per sequence and per context token read),
    plus blocks restored from the host tier. The defaults give about 300 decode tok/s at four
    running sequences of ~70K context and a few thousand prefill tok/s.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_overhead_s: float = Field(0.004, ge=0, description="Fixed cost of a non-empty step.")
    decode_per_seq_s: float = Field(0.0012, ge=0, description="Decode cost per running sequence.")
    decode_per_context_token_s: float = Field(
        1.5e-8, ge=0, description="Decode cost per context token read (attention) per sequence."
    )
    prefill_per_token_s: float = Field(2.0e-4, ge=0, description="Prefill cost per new token.")
    prefill_per_token_context_s: float = Field(
        2.0e-9, ge=0, description="Extra prefill cost per new token per token of context before it."
    )
    restore_per_block_s: float = Field(
        0.01, ge=0, description="Cost of restoring one KV block from the host tier."
    )

    def scaled(self, factor: float) -> CostModel:
        """The same model with every cost multiplied by `factor` (a slower or faster engine:
        each non-empty step and each restore takes `factor` times as long)."""
        if not 0 < factor < float("inf"):
            raise ValueError(f"a step cost factor must be a positive number, not {factor}")
        return CostModel(**{name: value * factor for name, value in self.model_dump().items()})

    def prefill_s(self, tokens: int, context: int) -> float:
        """Engine seconds to prefill `tokens` new tokens that follow `context` cached tokens."""
        mean_context = context + tokens / 2
        return tokens * (self.prefill_per_token_s + self.prefill_per_token_context_s * mean_context)

    def decode_s(self, num_seqs: int, context_tokens: int) -> float:
        """Engine seconds to decode one token for each of `num_seqs` sequences."""
        return num_seqs * self.decode_per_seq_s + context_tokens * self.decode_per_context_token_s

    def step_s(self, prefills: Sequence[tuple[int, int]], decode_contexts: Sequence[int]) -> float:
        """Engine seconds of one step: `prefills` are its (new tokens, cached context) chunks,
        `decode_contexts` the context of each sequence it decodes one token for.

        An empty step is 0 here: what an engine loop costs when nothing is scheduled is the
        engine's own figure (`idle_tick_s`, a calibration's `empty_step_s`). Restores are not
        part of it (the simulator adds them itself).
        """
        if not prefills and not decode_contexts:
            return 0.0
        prefill = sum(self.prefill_s(tokens, context) for tokens, context in prefills)
        decode = self.decode_s(len(decode_contexts), sum(decode_contexts))
        return self.step_overhead_s + prefill + decode


FaultKind = Literal["freeze", "block", "thrash", "busy_hang", "dead_core", "hidden_freeze"]


class Fault(BaseModel):
    """A fault the simulator plays (`stallkit.engine.sim.faults`): what goes wrong, and when."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: FaultKind = Field(
        description="freeze, block, thrash, busy_hang, dead_core or hidden_freeze."
    )
    at_s: float = Field(ge=0, description="Engine seconds after start at which it strikes.")

    @model_validator(mode="before")
    @classmethod
    def _from_spec(cls, value: object) -> object:
        """`KIND@SECONDS`, as `--fault` takes it, is the same fault."""
        if not isinstance(value, str):
            return value
        kind, at, seconds = value.strip().partition("@")
        if not at:
            raise ValueError(f'{value!r} is not KIND@SECONDS (e.g. "hidden_freeze@60")')
        return {"kind": kind, "at_s": seconds}


class SimConfig(BaseModel):
    """Every knob of the simulated engine; the defaults are the restore-stall sizes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: Policy = Field(
        "base",
        description="Scheduler policy: `base` (the fork) or `fix` (leftover decode may preempt).",
    )
    model_name: str = Field("stallkit-sim", min_length=1, description="Served model name.")
    max_model_len: int = Field(131072, gt=0, description="Longest prompt plus output, tokens.")
    max_num_seqs: int = Field(4, gt=0, description="Running slots (max_num_seqs).")
    num_blocks: int = Field(319, gt=0, description="KV blocks in the GPU pool.")
    block_size: int = Field(
        896, gt=0, description="Tokens per KV block (four ~70K-token contexts fill 319 blocks)."
    )
    max_num_batched_tokens: int = Field(
        2048, gt=0, description="Per-step token budget (chunked prefill)."
    )
    prefill_compute_share: float = Field(
        0.4, description="Prefill's share of compute when prefill and decode contend; 0 = off."
    )
    host_tier_blocks: int = Field(
        4096, ge=0, description="Blocks the host tier (LMCache on-evict) holds; 0 = off."
    )
    restore_max_wait_s: float = Field(
        60.0, ge=0, description="Engine seconds a restore waits for capacity before recomputing."
    )
    num_gpus: int = Field(2, gt=0, description="Simulated GPUs (for utilisation telemetry).")
    cost: CostModel = Field(default_factory=CostModel, description="Step cost model.")
    idle_tick_s: float = Field(0.02, gt=0, description="Engine seconds an empty step takes.")
    fault: Fault | None = Field(
        None,
        description='A stall to play on purpose (e.g. {kind = "block", at_s = 600}, or '
        '"block@600").',
    )

    @field_validator("prefill_compute_share")
    @classmethod
    def _share_in_range(cls, value: float) -> float:
        if value != 0 and not 0 < value < 1:
            raise ValueError("prefill_compute_share must be 0 (off) or strictly between 0 and 1")
        return value

    @model_validator(mode="after")
    def _pool_holds_something(self) -> SimConfig:
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be at least max_num_seqs")
        return self

    @property
    def max_request_tokens(self) -> int:
        """Longest request (prompt plus output) the engine can ever hold."""
        return min(self.max_model_len, self.num_blocks * self.block_size)
