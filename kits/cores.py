"""The engine core of a virtual-clock arm, from its spec and the kit: the simulator or the twin.

`sim:` arms get the simulator's core with the kit's `[sim.engine]` settings; `twin:` arms get
vLLM's own scheduler class (`twin_config` resolves which, over what pool, at what step cost).
The twin's sizes are the vLLM flags of the arm's `engine_args` over the simulator's sizes, its
patched policies take the kit's `[patched] prefill_compute_share`, its cost the kit's
`[twin] calibration`. Building a twin core imports vLLM, so it happens in the arm's worker.
"""

from __future__ import annotations

import logging

from engine import (
    EngineCore,
    EngineError,
    EngineSpec,
    SimConfig,
    SimEngine,
    TwinConfig,
    TwinEngine,
    TwinSpec,
    load_calibration,
    twin_config_for,
    vllm_sizes,
    with_fault,
)
from kits.config import Kit

__all__ = ["twin_config", "virtual_core"]


def twin_config(kit: Kit, spec: TwinSpec, arm: str) -> TwinConfig:
    """The twin engine an arm of `kit` runs for `spec`."""
    sim = kit.sim.engine
    sizes: dict[str, int | bool] = {
        "max_num_seqs": sim.max_num_seqs,
        "num_blocks": sim.num_blocks,
        "block_size": sim.block_size,
        "max_num_batched_tokens": sim.max_num_batched_tokens,
        "max_model_len": sim.max_model_len,
        **vllm_sizes(kit.engine.engine_args_for(arm)),
    }
    twin = kit.twin
    return twin_config_for(
        spec,
        sizes,
        load_calibration(twin.calibration),
        prefill_compute_share=kit.patched.prefill_compute_share,
        additional_config=twin.additional_config,
        empty_step_s=twin.empty_step_s,
        skip_empty_steps=twin.skip_empty_steps,
        num_gpus=sim.num_gpus,
        overlay=twin.overlay_for(arm),
    )


def virtual_core(kit: Kit, spec: EngineSpec, arm: str, log: logging.Logger) -> EngineCore:
    """The in-process engine core of a virtual-clock arm (`sim:` or `twin:`)."""
    if spec.kind == "twin":
        if kit.sim.engine.fault is not None:
            raise EngineError(
                f"{spec.raw} cannot play [sim.engine] fault", "faults are played by sim: arms"
            )
        return TwinEngine(twin_config(kit, spec, arm), log)
    if spec.kind != "sim":
        raise ValueError(f"{spec.raw} does not run on the virtual clock")
    cfg = kit.sim.engine.model_copy(update={"policy": spec.policy})
    config = SimConfig.model_validate(cfg.model_dump())
    return with_fault(SimEngine(config, log), config.fault)
