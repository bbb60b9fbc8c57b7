"""The simulator's scheduler state: what `GET /debug/state` serves and a bundle's `sim-state.json`.

Written by the simulator (its HTTP front, or the virtual clock in process) and read by the
monitor's forensics, which quotes it in one line in the bundle's manifest. Times are engine
seconds since the simulator started.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SIM_STATE_FILE", "SimPool", "SimRequestState", "SimState"]

#: in a forensics bundle of a simulator arm
SIM_STATE_FILE = "sim-state.json"

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class SimRequestState(BaseModel):
    """One running or waiting request."""

    model_config = _FROZEN
    id: str = Field(description="The engine's request id.")
    tokens: int = Field(description="Prompt plus output tokens so far.")
    computed: int = Field(description="Tokens whose KV is computed.")
    outputs: int = Field(description="Output tokens so far.")
    blocks: int = Field(description="KV blocks held.")
    preemptions: int = Field(description="Times this request was preempted.")
    reason: Literal["capacity", "deferred"] | None = Field(
        None, description="Why it waits (waiting requests only): no room, or a deferred restore."
    )
    deferred_since_s: float | None = Field(
        None, description="When its restore was first refused (deferred restores only)."
    )


class SimPool(BaseModel):
    """The KV block pool."""

    model_config = _FROZEN
    num_blocks: int = Field(description="Usable GPU blocks.")
    free: int = Field(description="Blocks neither held nor cached.")
    usage: float = Field(description="Share of blocks held by requests (0..1).")
    host_blocks: int = Field(description="Blocks in the host tier.")


class SimState(BaseModel):
    """The scheduler at one moment: turn clocks, the pool, who runs and who waits."""

    model_config = _FROZEN
    engine_time_s: float = Field(description="The engine clock when the state was read.")
    frozen: bool = Field(description="The engine was frozen (a fault injected on purpose).")
    step: int = Field(description="Steps taken.")
    now_s: float = Field(description="Engine time of the last step.")
    policy: str = Field(description="base or fix.")
    prefill_compute_share: float = Field(description="Prefill's share of contended compute.")
    vruntime_prefill: float = Field(description="Prefill's virtual runtime.")
    vruntime_decode: float = Field(description="Decode's virtual runtime.")
    gpu_busy: bool = Field(description="The last step used the GPU.")
    empty_steps: int = Field(description="Steps that scheduled nothing, so far.")
    pool: SimPool
    running: list[SimRequestState]
    waiting: list[SimRequestState]

    def one_line(self) -> str:
        """What a developer reads first in a stall: who holds the slots and the pool, who waits
        and why, and whether the scheduler is still stepping (empty steps) or not."""
        deferred = sum(1 for r in self.waiting if r.reason == "deferred")
        return (
            f"scheduler ({self.policy}): {len(self.running)} running, {len(self.waiting)} "
            f"waiting ({len(self.waiting) - deferred} capacity, {deferred} deferred), "
            f"{self.pool.free} of {self.pool.num_blocks} blocks free, "
            f"{self.empty_steps} empty steps so far"
        )
