"""The fork's regression scenario, step by step: why `base` livelocks and `fix` does not.

Compute share 0.4; two decodes fill a small KV pool (each has room for three more tokens in
its last block); two restores wait, either behind full running slots (`full-slots`) or with a
slot free but no GPU room for their pages (`free-slot`). Under `base` the first prefill turn
that finds both decodes needing a block schedules nothing, records nothing, and is chosen again
forever; under `fix` its leftover decode pass preempts the newer decode and the older one goes
on. Pure: the setup runs on the core with engine time passed in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from stallkit.engine.policy.controller import Policy
from stallkit.engine.sim.config import SimConfig
from stallkit.engine.sim.core import SimEngine

Case = Literal["full-slots", "free-slot"]
CASES: tuple[Case, ...] = ("full-slots", "free-slot")

_BLOCK = 16
#: decode prompts leave three free token slots in their fourth (last) block
_DECODE_PROMPT = 4 * _BLOCK - 3


@dataclass(frozen=True)
class TraceStep:
    """One traced step (steps are numbered from 1)."""

    step: int
    turn: str
    scheduled_tokens: int
    decode_tokens: int
    prefill_tokens: int
    preemptions: int
    restores_polled: int
    kv_usage: float
    vruntime_prefill: float
    vruntime_decode: float
    running: int
    #: running slots of the engine (`max_num_seqs`): full in `full-slots`, one free in `free-slot`
    slots: int
    waiting: int
    deferred: int
    duration_s: float

    def to_json(self) -> dict[str, object]:
        """The step as a JSON-ready dict."""
        return asdict(self)


def scenario_config(policy: Policy, case: Case) -> SimConfig:
    """The scenario's engine: 8 blocks of 16 tokens, share 0.4, a host tier."""
    return SimConfig(
        policy=policy,
        max_num_seqs=2 if case == "full-slots" else 3,
        num_blocks=8,
        block_size=_BLOCK,
        max_model_len=8 * _BLOCK,
        max_num_batched_tokens=128,
        prefill_compute_share=0.4,
        host_tier_blocks=64,
        restore_max_wait_s=60.0,
    )


def _words(tag: str, count: int) -> list[str]:
    return [f"{tag}{i}" for i in range(count)]


def _drain(engine: SimEngine, now_s: float) -> float:
    while engine.has_work():
        now_s += engine.step(now_s).duration_s
    return now_s


def prepare(policy: Policy, case: Case) -> tuple[SimEngine, float]:
    """Build the scenario's state; returns the engine and the engine time it is at."""
    engine = SimEngine(scenario_config(policy, case))
    now = 0.0
    # two earlier conversations: two full blocks each, cached when they finish
    earlier = {name: _words(name, 2 * _BLOCK) for name in ("conv1-", "conv2-")}
    for name, prompt in earlier.items():
        engine.add_request(f"{name}turn1", prompt, 1, now)
    now = _drain(engine, now)
    # two long decodes take the whole pool, evicting the conversations to the host tier
    for name in ("decode-1", "decode-2"):
        engine.add_request(name, _words(name, _DECODE_PROMPT), 1000, now)
    while engine.stats.waiting_by_reason["capacity"] or any(
        (info := engine.request_info(n)) is None or info.output_tokens == 0
        for n in ("decode-1", "decode-2")
    ):
        now += engine.step(now).duration_s
    # the conversations' next turns: their prefixes are in the host tier only -> restores
    # (their two full blocks are the whole shared prefix, whatever the one-word reply was)
    for name, prompt in earlier.items():
        engine.add_request(f"{name}turn2", [*prompt, "reply", *_words("new", 20)], 8, now)
    return engine, now


def run_trace(policy: Policy, case: Case, steps: int = 12) -> list[TraceStep]:
    """Run the scenario for `steps` steps and describe each one."""
    engine, now = prepare(policy, case)
    return trace_steps(engine, now, steps)


def trace_steps(engine: SimEngine, now_s: float, steps: int) -> list[TraceStep]:
    """Run `steps` steps of `engine` from engine time `now_s` and describe each one."""
    rows: list[TraceStep] = []
    now = now_s
    for number in range(1, steps + 1):
        result = engine.step(now)
        now += result.duration_s
        stats = engine.stats
        rows.append(
            TraceStep(
                step=number,
                turn=result.turn,
                scheduled_tokens=result.scheduled_tokens,
                decode_tokens=result.decode_tokens,
                prefill_tokens=result.prefill_tokens,
                preemptions=result.preemptions,
                restores_polled=result.restores_polled,
                kv_usage=result.kv_usage,
                vruntime_prefill=result.vruntime_prefill,
                vruntime_decode=result.vruntime_decode,
                running=stats.num_running,
                slots=engine.config.max_num_seqs,
                waiting=stats.num_waiting,
                deferred=stats.waiting_by_reason["deferred"],
                duration_s=result.duration_s,
            )
        )
    return rows
