"""The twin's settings: which vLLM scheduler class, over what pool, at what step cost.

Pure (no vLLM import), so a kit is validated and a `twin:` arm planned without vLLM. The sizes
are vLLM's own (`max_num_seqs`, a pool of `num_blocks` usable blocks of `block_size` tokens,
the per-step budget `max_num_batched_tokens`, `max_model_len`); `vllm_sizes` reads them from a
vLLM command line, so the twin of a real engine takes the flags that engine was started with.
The step cost is the simulator's cost model (`stallkit.engine.sim.config.CostModel`, fitted on a real
engine by `kit engine calibrate`) plus the cost of an empty step: the engine loop's overhead,
which must be above zero or a scheduler that schedules nothing would never let time pass.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from stallkit.engine.errors import EngineError
from stallkit.engine.sim.config import CostModel, Fault
from stallkit.engine.spec import TwinSpec
from stallkit.engine.twin.calibration import Calibration
from stallkit.engine.twin.layers import LAYERS_HELP, PRESETS, check_layers
from stallkit.engine.vllm_plugin import ASYNC_PATCHED_SCHEDULER, PATCHED_SCHEDULER

__all__ = [
    "FAULT_HINT",
    "PATCHED_SCHEDULER",
    "STOCK_SCHEDULER",
    "TwinConfig",
    "check_no_fault",
    "twin_config_for",
    "vllm_sizes",
]

#: the hint when a twin is given a fault: faults are the simulator's to play
FAULT_HINT = "faults are played by the simulator (sim: arms, `kit sim serve --core sim`)"

#: vLLM's own v1 scheduler
STOCK_SCHEDULER = "vllm.v1.core.sched.scheduler.Scheduler"
#: the class vLLM's own selection picks with async scheduling and no --scheduler-cls
ASYNC_SCHEDULER = "vllm.v1.core.sched.async_scheduler.AsyncScheduler"
#: each synchronous class and the async one its launcher runs with --async-scheduling
_ASYNC_COUNTERPART = {STOCK_SCHEDULER: ASYNC_SCHEDULER, PATCHED_SCHEDULER: ASYNC_PATCHED_SCHEDULER}

#: vLLM flags the twin takes its sizes from, and the field each one sets
_SIZE_FLAGS = {
    "--max-num-seqs": "max_num_seqs",
    "--block-size": "block_size",
    "--num-gpu-blocks-override": "num_gpu_blocks",
    "--max-model-len": "max_model_len",
    "--max-num-batched-tokens": "max_num_batched_tokens",
}

#: a layer layout (`stallkit.engine.twin.layers`), checked where it is read
_LayersText = Annotated[str | None, AfterValidator(check_layers)]


class TwinConfig(BaseModel):
    """One twin engine: a scheduler class, vLLM's sizes, the step cost."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scheduler_cls: str = Field(
        STOCK_SCHEDULER, min_length=1, description="The scheduler class, `module.Class`."
    )
    additional_config: dict[str, Any] = Field(
        default_factory=dict, description="vLLM's --additional-config, as the scheduler reads it."
    )
    model_name: str = Field("stallkit-twin", min_length=1, description="Served model name.")
    max_num_seqs: int = Field(4, gt=0, description="Running slots (max_num_seqs).")
    num_blocks: int = Field(
        319, gt=0, description="Usable KV blocks (vLLM's pool holds one more: its null block)."
    )
    block_size: int = Field(896, gt=0, description="Tokens per KV block.")
    max_num_batched_tokens: int = Field(2048, gt=0, description="Per-step token budget.")
    max_model_len: int = Field(131072, gt=0, description="Longest prompt plus output, tokens.")
    enable_prefix_caching: bool = Field(True, description="vLLM's prefix cache over the pool.")
    reserve_full_isl: bool = Field(
        True,
        description="vLLM's scheduler_reserve_full_isl: admit a request only when its whole "
        "prompt fits the pool (vLLM's default), not only its first chunk",
    )
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        "fcfs",
        description="vLLM's --scheduling-policy: first come first served, or by priority (then "
        "arrival); the twin's requests all have priority 0",
    )
    num_speculative_tokens: int = Field(
        0,
        ge=0,
        description="vLLM's --speculative-config num_speculative_tokens with method ngram (0: no "
        "speculative decoding): the scheduler reserves and allocates its slots; the twin "
        "proposes no drafts",
    )
    cost: CostModel = Field(default_factory=CostModel, description="Step cost of scheduled work.")
    empty_step_s: float = Field(
        0.002, gt=0, description="Engine seconds an empty step takes (the engine loop's overhead)."
    )
    skip_empty_steps: bool = Field(
        True,
        description="Skip a run of identical empty steps to the next event, counting each one "
        "(only when the scheduler's state did not change over an empty step).",
    )
    num_gpus: int = Field(1, gt=0, description="GPUs the utilisation is reported for.")
    overlay: str | None = Field(
        None, description="A source tree whose modules shadow the installed ones (a fork's vLLM)."
    )
    kv_transfer_config: dict[str, Any] | None = Field(
        None,
        description="vLLM's --kv-transfer-config (a JSON object) from the engine arguments: the "
        "KV connector the scheduler runs (None: none)",
    )
    kv_link_latency_s: float = Field(
        1e-5,
        ge=0,
        description="Engine seconds a KV transfer waits before its first block moves, per "
        "direction (default about 10 us: a DMA copy's launch over PCIe)",
    )
    kv_seconds_per_block: float = Field(
        0.006,
        ge=0,
        description="Engine seconds one KV block takes over the host link, per direction "
        "(default: an 896-token block of a Llama-3-70B-class model at TP2, 160 KiB of KV per "
        "token per GPU, about 147 MB, at PCIe Gen4 x16's 25 GB/s effective)",
    )
    kv_host_blocks: int = Field(
        1024,
        gt=0,
        description="KV blocks the host tier holds (default: about 150 GB of host memory per "
        "GPU at the default block, a 1.2 TB host shared by 8 GPUs)",
    )
    kv_load_fail_every: int = Field(
        0,
        ge=0,
        description="Every Nth KV load the byte mover makes fails, its blocks reported to the "
        "scheduler as vLLM's invalid_block_ids (0: none; vLLM's kv_load_failure_policy decides "
        "what follows)",
    )

    async_scheduling: Literal["auto", "on", "off"] = Field(
        "off",
        description="vLLM's async scheduling: the scheduler's async class, stepped as vLLM's "
        "batch queue steps it (step N+1 scheduled before step N's output is applied). `auto`: "
        "what `vllm serve` picks on the GPU engine the twin stands for (on, off with ngram "
        "drafts); `off` (default): one output at a time, as before",
    )

    layers: _LayersText = Field(
        None,
        description="The model's layer layout, for vLLM's KV cache groups (one per kind of "
        "layer, as for a hybrid model): " + LAYERS_HELP + ", ".join(sorted(PRESETS)) + ". "
        "The groups share the pool (num_blocks), and vLLM refuses one where a max_model_len "
        "request does not fit. Unset: one full-attention layer, one group",
    )

    @model_validator(mode="after")
    def _async_drafts(self) -> TwinConfig:
        if self.async_scheduling == "on" and self.num_speculative_tokens:
            raise ValueError(
                "async_scheduling = 'on' with ngram drafts (num_speculative_tokens): vLLM "
                "refuses that pair; use 'auto' or 'off'"
            )
        if self.layers is not None and self.kv_transfer_config is not None:
            raise ValueError(
                "layers with a --kv-transfer-config: a KV connector over a layer layout is "
                "not supported by the twin yet"
            )
        return self

    @property
    def async_on(self) -> bool:
        """Whether the twin runs async scheduling: `auto` resolves as vLLM 0.32's
        `VllmConfig.__post_init__` does on a GPU platform (config/vllm.py:1585-1644): on unless
        an incompatible option is set; of those, the twin can only have (CPU) ngram drafts."""
        if self.async_scheduling == "auto":
            return not self.num_speculative_tokens
        return self.async_scheduling == "on"

    @property
    def scheduler_class_name(self) -> str:
        """The class the twin builds: with async scheduling on, the async counterpart of the
        stock or plugin class (as vLLM's `SchedulerConfig.get_scheduler_cls` and the plugin's
        launcher pick it); any other class as named (vLLM runs a --scheduler-cls as given)."""
        if self.async_on:
            return _ASYNC_COUNTERPART.get(self.scheduler_cls, self.scheduler_cls)
        return self.scheduler_cls


#: vLLM switches the twin follows, and the field each one sets
_SWITCHES = {
    "--scheduler-reserve-full-isl": ("reserve_full_isl", True),
    "--no-scheduler-reserve-full-isl": ("reserve_full_isl", False),
    "--enable-prefix-caching": ("enable_prefix_caching", True),
    "--no-enable-prefix-caching": ("enable_prefix_caching", False),
}


def vllm_sizes(engine_args: Sequence[str]) -> dict[str, int | bool | str]:
    """The twin's fields that a vLLM command line sets (`--flag N` or `--flag=N`, switches).

    `--num-gpu-blocks-override N` is vLLM's whole pool, null block included: N - 1 usable.
    """
    args = list(engine_args)
    sizes: dict[str, int | bool | str] = {}
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        switch = _SWITCHES.get(flag.replace("_", "-"))
        if switch is not None and not eq:
            sizes[switch[0]] = switch[1]
            continue
        if flag.replace("_", "-") == "--scheduling-policy":
            text = value if eq else args[i + 1] if i + 1 < len(args) else ""
            if text in ("fcfs", "priority"):  # vLLM itself refuses another
                sizes["scheduling_policy"] = text
            continue
        if flag.replace("_", "-") == "--speculative-config":
            text = value if eq else args[i + 1] if i + 1 < len(args) else ""
            sizes.update(_ngram_tokens(text))
            continue
        field = _SIZE_FLAGS.get(flag.replace("_", "-"))
        if field is None:
            continue
        text = value if eq else args[i + 1] if i + 1 < len(args) else ""
        try:
            number = int(text)
        except ValueError:
            continue  # vLLM itself refuses it; the twin keeps its default
        if field == "num_gpu_blocks":
            sizes["num_blocks"] = number - 1
        else:
            sizes[field] = number
    return sizes


def _ngram_tokens(text: str) -> dict[str, int]:
    """`num_speculative_tokens` of an ngram --speculative-config (nothing for another method:
    its drafter is a model the twin does not run)."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError:
        return {}
    if not isinstance(config, dict) or config.get("method") != "ngram":
        return {}
    tokens = config.get("num_speculative_tokens")
    return {"num_speculative_tokens": tokens} if isinstance(tokens, int) and tokens > 0 else {}


def twin_config_for(
    spec: TwinSpec,
    sizes: Mapping[str, int | bool | str],
    calibration: Calibration,
    *,
    prefill_compute_share: float,
    additional_config: Mapping[str, Any] | None = None,
    empty_step_s: float | None = None,
    **fields: Any,
) -> TwinConfig:
    """The twin a `twin:` spec names, over `sizes`, at the step cost of `calibration`.

    `twin:patched:POLICY` configures the plugin with `prefill_compute_share`; `twin:stock` and
    `twin:MODULE:CLASS` get `additional_config` as vLLM's --additional-config. `fields` sets
    any other TwinConfig field (empty_step_s overrides the calibration's).
    """
    if spec.scheduler == "patched":
        cls = PATCHED_SCHEDULER
        section = {"policy": spec.policy, "prefill_compute_share": prefill_compute_share}
        additional: dict[str, Any] = {"patched_scheduler": section}
    else:
        cls = STOCK_SCHEDULER if spec.scheduler == "stock" else spec.cls or STOCK_SCHEDULER
        additional = dict(additional_config or {})
    return TwinConfig(
        scheduler_cls=cls,
        additional_config=additional,
        cost=calibration.cost,
        empty_step_s=empty_step_s or calibration.empty_step_s,
        **{**dict(sizes), **fields},
    )


def check_no_fault(what: str, fault: Fault | None, where: str) -> None:
    """The one rule on faults and the twin: a twin plays none. Raise EngineError when `fault`
    is set, naming `what` (the twin spec, the twin arms, `--core X`) and `where` the fault
    was set (the kit's `[sim.engine] fault`, the config file's `fault`)."""
    if fault is not None:
        raise EngineError(f"{what} cannot play {where} ({fault.kind})", FAULT_HINT)
