"""The compute-share controller: prefill and decode take turns by weighted virtual runtime.

A contended step that ran charges its class `elapsed / share` (prefill) or
`elapsed / (1 - share)` (decode), and pulls the other class up so that it trails by at most one
charge. Prefill gets the turn only when its virtual runtime is strictly behind decode's; with one
class runnable that class runs uncontended and both clocks reset. An empty step records nothing,
which is what lets a prefill turn that can schedule nothing repeat forever. `may_preempt` is the
prefill-turn rule that tells `base` from `fix`. Pure and dependency-free: the simulator and the
vLLM scheduler plugin (`stallkit.engine.vllm_plugin`) both import this one module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

Turn = Literal["prefill", "decode", "none"]
Policy = Literal["base", "fix"]
#: every policy, in order: the livelocking scheduler and the fixed one
POLICIES: tuple[Policy, ...] = get_args(Policy)


def runnable_classes(remaining_tokens: Iterable[int], num_waiting: int) -> tuple[bool, bool]:
    """(decode runnable, prefill runnable) from the running requests' tokens still to compute.

    A running request with at most one token left is decoding; one with more is mid-prefill.
    Any waiting request makes prefill runnable, even when no running slot is free.
    """
    decode = prefill = False
    for remaining in remaining_tokens:
        if remaining <= 1:
            decode = True
        else:
            prefill = True
    return decode, prefill or num_waiting > 0


def may_preempt(policy: Policy, turn: Turn, contended: bool, scheduled_anything: bool) -> bool:
    """Whether a running request that cannot get a block may preempt another, in this step.

    Outside a contended prefill turn it always may. In a contended prefill turn (its leftover
    decode pass) `base` never may, which is the livelock, and `fix` may while the step has
    scheduled nothing so far.
    """
    if not (contended and turn == "prefill"):
        return True
    return policy == "fix" and not scheduled_anything


class ComputeShareController:
    """Two virtual runtimes and the rule that picks the class of the next step."""

    def __init__(self, prefill_share: float) -> None:
        self.share = prefill_share
        self.vruntime_prefill = 0.0
        self.vruntime_decode = 0.0

    def select(self, decode_runnable: bool, prefill_runnable: bool) -> tuple[Turn, bool]:
        """The class of the next step and whether the step is contended.

        Share 0 (off) and an idle engine give ("none", False); a single runnable class gives
        that class, uncontended, and resets both clocks.
        """
        if self.share == 0 or not (decode_runnable or prefill_runnable):
            return "none", False
        if not (decode_runnable and prefill_runnable):
            self.reset()
            return ("decode" if decode_runnable else "prefill"), False
        if self.vruntime_prefill < self.vruntime_decode:
            return "prefill", True
        return "decode", True

    def charge(self, turn: Turn, elapsed_s: float) -> None:
        """Record a contended step of class `turn` that ran for `elapsed_s` engine seconds."""
        if turn == "prefill":
            charge = elapsed_s / self.share
            self.vruntime_prefill += charge
            self.vruntime_decode = max(self.vruntime_decode, self.vruntime_prefill - charge)
        elif turn == "decode":
            charge = elapsed_s / (1.0 - self.share)
            self.vruntime_decode += charge
            self.vruntime_prefill = max(self.vruntime_prefill, self.vruntime_decode - charge)

    def reset(self) -> None:
        """Forget the history (only one class is runnable)."""
        self.vruntime_prefill = 0.0
        self.vruntime_decode = 0.0
