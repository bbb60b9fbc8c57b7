"""`kit engine calibrate`: fit the twin's step cost model on a real engine, write it as JSON.

Thin: build the kit and the options, run `stallkit.kits.calibrate.execute`, print the table, save the file.
The orchestration lives in `stallkit.kits.calibrate.execute`; `stallkit.kits.cli.engine` registers the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from stallkit.contract.errors import validation_message
from stallkit.kits.calibrate.probes import CalibrateOptions
from stallkit.kits.cli.common import ctrl_c, err_console, fail, interrupted, user_errors
from stallkit.kits.cli.fields import field_option, flags_by_field


@user_errors
def calibrate(
    ctx: typer.Context,
    spec: Annotated[
        str,
        typer.Argument(
            help="Engine spec: vllm:DIR, patched:base|patched:fix, IMAGE, or url:http://HOST:PORT"
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Calibration file to write (JSON).")],
    kit: Annotated[
        str | None,
        typer.Option(
            "--kit",
            "-k",
            help="Kit whose [engine] section starts the engine (and gives its sizes).",
        ),
    ] = None,
    engine_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--engine-arg",
            help="An engine argument appended to the kit's (repeat it; `--engine-arg=--flag`).",
        ),
    ] = None,
    repeats: int = field_option(CalibrateOptions, "repeats"),
    decode_tokens: int = field_option(CalibrateOptions, "decode_tokens"),
    max_batch: int = field_option(CalibrateOptions, "max_batch"),
    max_num_batched_tokens: int | None = field_option(CalibrateOptions, "max_num_batched_tokens"),
    vocab_size: int | None = field_option(CalibrateOptions, "vocab_size"),
    empty_step_s: float | None = field_option(CalibrateOptions, "empty_step_s"),
    seed: int = field_option(CalibrateOptions, "seed"),
) -> None:
    """Measure a real engine's steps and fit the twin's cost model to them.

    Starts the engine of SPEC with the kit's engine arguments (or attaches to url:), sends
    prefills of several lengths one at a time and decode batches of several sizes and contexts
    (random token-id prompts, so nothing comes from the prefix cache), repeats each and takes
    the medians, fits the five coefficients by non-negative least squares, and writes the
    calibration with its fit error to --out. Progress goes to stderr; Ctrl-C stops the engine
    and writes nothing.
    """
    from stallkit.engine import parse_spec
    from stallkit.kits.arm.prerequisites import check_arms_start
    from stallkit.kits.calibrate.execute import calibrate as run_calibration
    from stallkit.kits.calibrate.execute import samples_table, summary_table
    from stallkit.kits.kit import Kit, load_kit

    fields = {
        "repeats": repeats,
        "decode_tokens": decode_tokens,
        "max_batch": max_batch,
        "max_num_batched_tokens": max_num_batched_tokens,
        "vocab_size": vocab_size,
        "empty_step_s": empty_step_s,
        "seed": seed,
    }
    try:
        options = CalibrateOptions.model_validate(fields)
    except ValidationError as exc:
        names = flags_by_field(ctx, CalibrateOptions)
        raise fail(
            validation_message(exc, names=names), "see kit engine calibrate --help"
        ) from None
    if out.is_dir() or not out.parent.is_dir():
        # checked before minutes of measuring, not after
        problem = "is a directory" if out.is_dir() else "is in a directory that does not exist"
        raise fail(f"--out {out} {problem}", "name a file to write, e.g. --out model.json")
    # without a kit only its engine section matters: a kit must name a run length
    base = (
        load_kit(kit)
        if kit
        else Kit.model_validate({"name": "calibrate", "load": {"duration_s": 1}})
    )
    args = [*base.engine.engine_args, *(engine_arg or [])]
    chosen = base.model_copy(
        update={"engine": base.engine.model_copy(update={"engine_args": args})}
    )

    def progress(line: str) -> None:
        err_console.print(line, highlight=False)

    engine = parse_spec(spec)
    check_arms_start(chosen, {"calibrate": engine})  # what a run would check, before it starts
    with ctrl_c() as stop:
        done = run_calibration(engine, chosen, options, progress)
    if stop.pressed:
        raise interrupted("interrupted: the engine is stopped, nothing written")
    done.calibration.save(out)
    from rich.console import Console

    console = Console()
    console.print(samples_table(done))
    console.print(summary_table(done))
    err_console.print(f"calibration written to {out}", highlight=False)
