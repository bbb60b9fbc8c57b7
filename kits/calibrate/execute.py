"""`kit engine calibrate`: fit the twin's step cost model on a real engine.

Starts the engine of a spec with the kit's engine arguments (or attaches to `url:`), learns
its sizes (the longest request from `/v1/models`, the KV pool from `vllm:cache_config_info`,
the running slots and the per-step budget from its flags), sends the probes `stallkit.kits.calibrate.probes`
plans through `stallkit.kits.calibrate.prober`, fits the cost model (`engine.fit_cost`) and stops what it
started, also on Ctrl-C. The result says where every number came from; nothing is written
here (the caller saves it, so an interrupted run leaves nothing half-done).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from stallkit.engine import (
    Calibration,
    EngineError,
    EngineSpec,
    fit_cost,
    time_empty_step,
    vllm_importable,
)
from stallkit.kits.arm.kinds import kind_of
from stallkit.kits.arm.launchers import make_launcher
from stallkit.kits.calibrate.prober import Measured, Progress, engine_sizes, run_probes
from stallkit.kits.calibrate.probes import (
    CalibrateOptions,
    DecodeProbe,
    EngineSizes,
    PrefillProbe,
    decode_rates,
    plan_probes,
)
from stallkit.kits.kit import Kit

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["CalibrateOptions", "Calibrated", "calibrate", "samples_table", "summary_table"]

#: token ids are drawn below this when the model's vocabulary is not known
DEFAULT_VOCAB = 1000
#: an empty step's cost when it is neither given nor timed: the order of vLLM's engine loop
#: with an empty schedule on a GPU host (the seed calibration's assumption)
DEFAULT_EMPTY_STEP_S = 0.003
#: how a sample was timed, for the notes
TIMING = {
    "engine": "vLLM's own request_prefill_time and inter_token_latency histograms (engine core "
    "timestamps)",
    "client": "the client's time to first token and the streams' seconds per token (the "
    "engine serves no histograms)",
}


@dataclass(frozen=True)
class Calibrated:
    """A finished calibration, with what it measured and on what sizes."""

    calibration: Calibration
    measured: Measured
    sizes: EngineSizes


def _model_dir(spec: EngineSpec, kit: Kit) -> Path | None:
    return kind_of(spec).model_dir(kit, spec)


def _vocab(model_dir: Path | None, options: CalibrateOptions) -> int:
    if options.vocab_size is not None:
        return options.vocab_size
    config = model_dir / "config.json" if model_dir else None
    if config is not None and config.is_file():
        return int(json.loads(config.read_text(encoding="utf-8")).get("vocab_size", DEFAULT_VOCAB))
    return DEFAULT_VOCAB


def calibrate(
    spec: EngineSpec, kit: Kit, options: CalibrateOptions, progress: Progress
) -> Calibrated:
    """Start (or attach to) the engine, measure it, stop it, fit; EngineError on failure."""
    if not kind_of(spec).real_steps:
        raise EngineError(
            f"{spec.raw} has no real engine steps to time",
            "calibrate vllm:MODEL_DIR, patched:base|fix, an image or url:http://HOST:PORT",
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    with tempfile.TemporaryDirectory(prefix="stallkit-calibrate-") as work:
        launcher = make_launcher("calibrate", spec, kit, Path(work))
        try:
            progress(
                f"attaching to {spec.raw}" if kind_of(spec).attaches else f"starting {spec.raw}"
            )
            launcher.start()
            launcher.wait_healthy(kit.engine.startup_timeout_s)
            run = _measure(launcher.url, spec, kit, options, progress, load)
        finally:
            launcher.stop()
    # timed once the engine is gone: importing vLLM here would slow the engine's steps
    empty_s, empty_note = _empty_step(options, progress)
    return Calibrated(_fit(run, spec, kit, options, empty_s, empty_note), run.measured, run.sizes)


@dataclass(frozen=True)
class _Run:
    measured: Measured
    sizes: EngineSizes
    model: str
    version: str
    prefills: list[PrefillProbe]
    decodes: list[DecodeProbe]
    #: the machine's load average before the engine started (others' work on it)
    load: float


def _measure(
    url: str,
    spec: EngineSpec,
    kit: Kit,
    options: CalibrateOptions,
    progress: Progress,
    load: float,
) -> _Run:
    sizes = engine_sizes(url, kit.engine.engine_args, options)
    prefills, decodes = plan_probes(sizes, options.decode_tokens, options.max_batch)
    progress(
        f"sizes: max_model_len {sizes.max_model_len}, {sizes.max_num_seqs} seqs, budget "
        f"{sizes.max_num_batched_tokens} tokens, pool {sizes.pool_blocks or 'unknown'} blocks "
        f"of {sizes.block_size}; {len(prefills)} prefills and {len(decodes)} decode batches, "
        f"{options.repeats} times each"
    )
    model, version = _served(url)
    vocab = _vocab(_model_dir(spec, kit), options)
    measured = asyncio.run(
        run_probes(url, model, vocab, sizes, prefills, decodes, options, progress)
    )
    return _Run(measured, sizes, model, version, prefills, decodes, load)


def _fit(
    run: _Run,
    spec: EngineSpec,
    kit: Kit,
    options: CalibrateOptions,
    empty_s: float,
    empty_note: str,
) -> Calibration:
    measured, sizes = run.measured, run.sizes
    spreads = sorted(measured.spread(s.label) for s in measured.samples)
    notes = [
        f"sizes: max_model_len {sizes.max_model_len}, max_num_seqs {sizes.max_num_seqs}, "
        f"max_num_batched_tokens {sizes.max_num_batched_tokens}, {sizes.pool_blocks} usable "
        f"KV blocks of {sizes.block_size} tokens",
        "prefill: one request at a time, max_tokens 1, random token ids (no prefix-cache "
        f"hit); {', '.join(str(p.prompt_tokens) for p in run.prefills)} tokens, chunked by "
        "the budget where longer",
        f"decode: batches {sorted({d.batch for d in run.decodes})} of {options.decode_tokens} "
        "tokens each at three prompt lengths; the step is the batch's mean inter-token "
        "latency (its first and last steps may hold a prefill or fewer sequences)",
        "timing: " + "; ".join(TIMING[how] for how in sorted(measured.timing)),
        f"each sample is the median of {options.repeats} repetitions run round-robin; spread "
        f"(interquartile range / median): median {spreads[len(spreads) // 2]:.0%}, worst "
        f"{spreads[-1]:.0%} (machine: {os.cpu_count()} CPUs, load average {run.load:.1f} before "
        "the engine started)",
        empty_note,
        "restore_per_block_s: the simulator's default, not measured (the twin ignores it)",
    ]
    if measured.skipped:
        notes.append(f"no sample from: {', '.join(measured.skipped)}")
    args = " ".join(kit.engine.engine_args) or "none"
    return fit_cost(
        measured.samples,
        empty_step_s=empty_s,
        source=f"kit engine calibrate {spec.kind}: {len(measured.samples)} probes",
        engine=f"vLLM {run.version} serving {run.model}, engine arguments: {args}",
        notes=notes,
    )


def _served(url: str) -> tuple[str, str]:
    with httpx.Client(base_url=url, timeout=10.0) as client:
        model = str(client.get("/v1/models").json()["data"][0]["id"])
        try:
            version = str(client.get("/version").json().get("version", "unknown"))
        except (httpx.HTTPError, ValueError):
            version = "unknown"
    return model, version


def _empty_step(options: CalibrateOptions, progress: Progress) -> tuple[float, str]:
    if options.empty_step_s is not None:
        return options.empty_step_s, f"empty_step_s: {options.empty_step_s * 1e3:g} ms, given"
    if vllm_importable():
        progress("timing an empty step of the installed vLLM's scheduler")
        took_s = time_empty_step()
        return took_s, (
            f"empty_step_s: {took_s * 1e6:.1f} µs, the installed vLLM's own Scheduler timed in "
            "this process over empty steps (schedule + update with a waiting request that "
            "never fits): a floor, without the engine core's queue polling and executor call"
        )
    return DEFAULT_EMPTY_STEP_S, (
        f"empty_step_s: {DEFAULT_EMPTY_STEP_S * 1e3:g} ms, assumed (the order of vLLM's engine "
        "loop with an empty schedule on a GPU host); not measured (vLLM is not installed here)"
    )


def summary_table(calibrated: Calibrated) -> Table:
    """Samples, fitted coefficients and the decode rates they imply, as a rich table."""
    from rich.table import Table

    calibration, sizes = calibrated.calibration, calibrated.sizes
    cost, fit = calibration.cost, calibration.fit
    table = Table(title="step cost model", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    if fit is not None:
        table.add_row("samples", str(fit.samples))
        table.add_row("fit", f"R² {fit.r_squared:.3f}, RMSE {fit.rmse_s * 1e3:.3f} ms, "
                      f"worst {fit.max_relative_error:.0%}")  # fmt: skip
    table.add_row("step_overhead_s", f"{cost.step_overhead_s * 1e3:.4g} ms")
    table.add_row("prefill_per_token_s", f"{cost.prefill_per_token_s * 1e6:.4g} µs")
    table.add_row("prefill_per_token_context_s", f"{cost.prefill_per_token_context_s:.4g} s")
    table.add_row("decode_per_seq_s", f"{cost.decode_per_seq_s * 1e3:.4g} ms")
    table.add_row("decode_per_context_token_s", f"{cost.decode_per_context_token_s:.4g} s")
    table.add_row("empty_step_s", f"{calibration.empty_step_s * 1e3:.4g} ms")
    context = sizes.max_model_len // 2
    batches = [b for b in (1, 2, 4, 8) if b <= sizes.max_num_seqs]
    for batch, rate in decode_rates(cost, batches, context):
        table.add_row(f"decode tok/s, {batch} seqs at {context} context", f"{rate:.0f}")
    return table


def samples_table(calibrated: Calibrated) -> Table:
    """Each probe's median time beside the fitted model's prediction, and its spread."""
    from rich.table import Table

    cost, measured = calibrated.calibration.cost, calibrated.measured
    table = Table(title="probes (median of the repetitions)")
    for name in ("probe", "measured", "predicted", "error", "spread"):
        table.add_column(name, justify="left" if name == "probe" else "right")
    for sample in measured.samples:
        predicted = sample.predicted_s(cost)
        table.add_row(
            sample.label,
            f"{sample.seconds * 1e3:.3f} ms",
            f"{predicted * 1e3:.3f} ms",
            f"{predicted / sample.seconds - 1:+.0%}",
            f"{measured.spread(sample.label):.0%}",
        )
    return table
