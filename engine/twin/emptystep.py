"""Time an empty step of the installed vLLM's own scheduler: the floor of an engine loop's cost.

A step that schedules nothing still runs the engine loop: `schedule()` walks the waiting
queue and finds nothing it can allocate, and `update_from_output()` takes the empty model
output. The twin charges such a step `empty_step_s`, which must be above zero, or a
livelock would never let time pass. This times those two calls on the real scheduler class
(the twin's own build, `stallkit.engine.twin.build.make_scheduler`) over a pool too small for the one
waiting request, in this process, and returns the median seconds per step. It is a lower
bound of the real loop: a real engine core also polls its input queue and calls its executor
with the empty schedule (an RPC to every worker on a tensor-parallel GPU engine). Imports
vLLM: called only where it is installed.
"""

from __future__ import annotations

import statistics
import time

from stallkit.engine.twin.build import make_scheduler, quiet_vllm_logging
from stallkit.engine.twin.config import TwinConfig

__all__ = ["time_empty_step"]

#: tokens per block of the timing pool; the pool holds two blocks, the request needs four
_BLOCK = 16


def time_empty_step(scheduler_cls: str | None = None, steps: int = 2000, batch: int = 100) -> float:
    """Median seconds of one empty step (schedule + update) of `scheduler_cls` (default:
    vLLM's own), over `steps` steps timed in batches of `batch`."""
    fields = {"scheduler_cls": scheduler_cls} if scheduler_cls else {}
    config = TwinConfig(
        **fields, num_blocks=2, block_size=_BLOCK, max_num_batched_tokens=4 * _BLOCK,
        max_num_seqs=4, max_model_len=8 * _BLOCK, enable_prefix_caching=False,
    )  # fmt: skip
    quiet_vllm_logging()
    sched = make_scheduler(config)
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT
    from vllm.v1.request import Request

    prompt = list(range(3, 3 + 4 * _BLOCK))  # four blocks' worth: never fits the two
    sched.add_request(
        Request("empty-step", prompt, SamplingParams(max_tokens=1, ignore_eos=True), None)
    )
    per_step: list[float] = []
    for _ in range(max(1, steps // batch)):
        started = time.perf_counter()
        for _ in range(batch):
            output = sched.schedule()
            if output.total_num_scheduled_tokens:  # a scheduler that found room after all
                raise RuntimeError("the empty-step timing scheduled work")
            sched.update_from_output(output, EMPTY_MODEL_RUNNER_OUTPUT)
        per_step.append((time.perf_counter() - started) / batch)
    return statistics.median(per_step)
