"""`kit load`: drive many streaming agents against any running OpenAI-compatible server.

Parses options into a :class:`~stallkit.loadgen.config.LoadConfig`, checks the server before any agent
starts, shows live progress, writes ``turns.jsonl``, ``summary.json`` and the resolved config
(``load.json``, without any API key) in the run directory, and prints the summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from stallkit.kits.cli.common import ctrl_c, interrupted, user_errors
from stallkit.kits.cli.fields import field_help, field_option, flags_by_field
from stallkit.loadgen import LoadConfig, sizes_for_context


def register(app: typer.Typer) -> None:
    """Add `kit load` to the top-level app."""
    app.command("load")(load)


@user_errors
def load(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(help="Server root, e.g. http://127.0.0.1:8000.")],
    model: str | None = field_option(LoadConfig, "model"),
    agents: int = field_option(LoadConfig, "agents"),
    min_context: int = field_option(LoadConfig, "min_context"),
    max_context: int = field_option(LoadConfig, "max_context"),
    read_timeout: float = field_option(LoadConfig, "read_timeout_s", "--read-timeout"),
    duration: float | None = field_option(LoadConfig, "duration_s"),
    max_turns: int | None = field_option(LoadConfig, "max_turns"),
    seed: int = field_option(LoadConfig, "seed"),
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Run directory (default ./kit-runs/<time>-load)."),
    ] = None,
    api_key_env: str | None = field_option(LoadConfig, "api_key_env"),
    tokenizer: str | None = field_option(LoadConfig, "tokenizer"),
    trace: Path | None = field_option(LoadConfig, "trace"),
    trace_speed: Annotated[
        float,
        typer.Option(
            min=0.001, help="Replay the trace this many times as fast as it was recorded."
        ),
    ] = 1.0,
    trace_block_tokens: int = field_option(LoadConfig, "trace_block_tokens", "--block-size"),
    auto_offset: bool = field_option(LoadConfig, "trace_auto_offset"),
    start_offset: int | None = field_option(LoadConfig, "trace_start_offset_ms"),
    end_offset: int | None = field_option(LoadConfig, "trace_end_offset_ms"),
    trace_salt: str | None = field_option(LoadConfig, "trace_salt"),
    arrivals: Annotated[
        str | None,
        typer.Option(
            help=field_help(LoadConfig, "arrivals"), metavar="[closed|constant|poisson|bursty]"
        ),
    ] = None,
    arrival_unit: str = field_option(LoadConfig, "arrival_unit", metavar="[requests|sessions]"),
    rate: float | None = field_option(LoadConfig, "rate"),
    rate_end: float | None = field_option(LoadConfig, "rate_end"),
    burstiness: float = field_option(LoadConfig, "burstiness"),
    stages: Annotated[
        str | None,
        typer.Option(
            help="Open-loop rate in stages, RATE:SECONDS[:RATE_END] each, comma-separated "
            "(e.g. 1:60,4:60:8; a stage with RATE_END ramps); arrivals end after the last.",
            metavar="STAGES",
        ),
    ] = None,
) -> None:
    """Run multi-agent streaming load with long, growing contexts; print and save a summary."""
    import time

    from stallkit.loadgen.http import loop

    options: dict[str, Any] = {
        "agents": agents, "min_context": min_context, "max_context": max_context,
        "read_timeout_s": read_timeout, "duration_s": duration, "max_turns": max_turns,
        "seed": seed, "model": model, "api_key_env": api_key_env, "tokenizer": tokenizer,
        "trace": None if trace is None else str(trace), "trace_second_s": 1.0 / trace_speed,
        "trace_block_tokens": trace_block_tokens, "trace_auto_offset": auto_offset,
        "trace_start_offset_ms": start_offset, "trace_end_offset_ms": end_offset,
        "trace_salt": trace_salt, "arrival_unit": arrival_unit, "rate": rate,
        "rate_end": rate_end, "burstiness": burstiness, "stages": _stages(stages),
    }  # fmt: skip
    if arrivals is not None:  # unset: closed, or Poisson when a rate or stages are given
        options["arrivals"] = arrivals
    cfg = _load_config(ctx, url, options)
    out_dir = out or Path("kit-runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-load"
    with ctrl_c() as stop:  # the summary of what ran, then exit 130
        loop.run(_drive(url, cfg, out_dir))
    _finish(out_dir)
    if stop.pressed:
        raise interrupted()


def _load_config(ctx: typer.Context, url: str, options: dict[str, Any]) -> LoadConfig:
    """The validated config of `kit load`'s options; a bad URL, option, or trace is one
    `LoadError`, raised before any request."""
    from pydantic import ValidationError

    from stallkit.contract.errors import validation_message
    from stallkit.contract.urls import URL_HINT, url_problem
    from stallkit.loadgen import LoadError

    # judged as the user wrote it, as `kit monitor` and `url:` specs judge theirs
    problem = url_problem(url)
    if problem is not None:
        raise LoadError(f"bad URL {url.strip()!r}: {problem}", URL_HINT)
    # turn sizes have no flags here: fit them to the context bounds the user gave
    options = options | sizes_for_context(options["min_context"], options["max_context"])
    try:
        cfg = LoadConfig.model_validate(options)
    except ValidationError as exc:
        raise LoadError(
            f"invalid load options: {validation_message(exc, names=flags_by_field(ctx, LoadConfig), default='')}",
            "see `kit load --help`",
        ) from None
    given = _given_flags(ctx)
    if cfg.trace is None:  # a window or salt with nothing to replay would be silently ignored
        stray = [f for f in given if f.startswith(("--fixed-schedule", "--trace-"))]
        if stray:
            raise LoadError(f"{stray[0]} applies to a trace replay only", "give --trace FILE")
        return cfg
    # a trace that does not parse, or a window that holds none of it, stops here
    from stallkit.loadgen import trace_replay

    replay = trace_replay(cfg)
    assert replay is not None
    agents = options["agents"]
    if "--agents" in given and agents != replay.sessions:
        raise LoadError(
            f"--agents {agents}: a trace runs one agent per session "
            f"({replay.sessions} in this trace)",
            "drop --agents, or cut the trace with --fixed-schedule-start/end-offset",
        )
    return cfg.model_copy(update={"agents": replay.sessions})  # recorded as it runs


async def _drive(url: str, cfg: Any, out_dir: Path) -> None:
    import contextlib
    import json

    from stallkit.contract.files import LOAD_FILE
    from stallkit.kits.cli.common import err_console
    from stallkit.loadgen import LoadProgress, live_progress, run_agents, workload_for
    from stallkit.loadgen.preflight import preflight

    info = await preflight(url, cfg)
    workload = workload_for(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    resolved = {"config": cfg.model_dump(mode="json"), "server": info.model_dump(mode="json")}
    if workload.replay is not None:  # what of the trace runs: digest, window, span, salt
        resolved["trace"] = workload.replay.model_dump(mode="json")
    (out_dir / LOAD_FILE).write_text(json.dumps(resolved, indent=2) + "\n")
    err_console.print(
        f"[dim]load:[/] {_what_runs(workload)} on {info.base_url} model {info.model} -> {out_dir}",
        highlight=False,
    )
    progress = LoadProgress(workload.agents, cfg.duration_s)
    with live_progress(progress, err_console):
        async with contextlib.aclosing(run_agents(info, cfg, out_dir)) as events:
            async for event in events:
                progress.update(event)


def _what_runs(workload: Any) -> str:
    """`12 agents`, or for a trace its sessions (one agent each), requests and span."""
    replay, cfg = workload.replay, workload.cfg
    if replay is None and cfg.process != "closed":
        rate = f"{cfg.rate:g}/s" if cfg.rate is not None else f"{len(cfg.stages)} stages"
        unit = "sessions (an agent each)" if cfg.arrival_unit == "sessions" else "requests"
        who = "" if cfg.arrival_unit == "sessions" else f" over {workload.agents} agents"
        return f"{cfg.process} arrivals of {unit} at {rate}{who}"
    if replay is None:
        return f"{workload.agents} agents"
    cut = f", {replay.left_out:,} outside the window" if replay.left_out else ""
    return (
        f"{replay.sessions:,} sessions (an agent each; {replay.requests:,} requests{cut} over "
        f"{replay.span_s:,.1f} trace s) of trace {replay.path}"
    )


def _finish(out_dir: Path) -> None:
    from rich.console import Console

    from stallkit.contract.files import SUMMARY_FILE, TURNS_FILE
    from stallkit.contract.jsonl import write_json
    from stallkit.contract.records import read_records
    from stallkit.contract.summary import summarize
    from stallkit.loadgen import summary_table

    if not (out_dir / TURNS_FILE).exists():
        return
    summary = summarize(read_records(out_dir))
    write_json(out_dir / SUMMARY_FILE, summary)
    Console().print(summary_table(summary))


def _stages(text: str | None) -> list[dict[str, float]] | None:
    """`--stages 1:60,4:60:8` as the load's stages (None: not given)."""
    if text is None:
        return None
    from stallkit.loadgen import LoadError

    stages = []
    for part in text.split(","):
        try:
            numbers = [float(n) for n in part.split(":")]
        except ValueError:
            numbers = []
        if len(numbers) not in (2, 3):
            raise LoadError(
                f"--stages: stage {part.strip()!r} is not RATE:SECONDS[:RATE_END]",
                "e.g. --stages 1:60,4:60:8",
            )
        stage = {"rate": numbers[0], "duration_s": numbers[1]}
        stages.append(stage | ({"rate_end": numbers[2]} if len(numbers) == 3 else {}))
    return stages


def _given_flags(ctx: typer.Context) -> list[str]:
    """The options the user gave on the command line (not their defaults), by flag name."""
    given = []
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name) if param.name else None
        if source is not None and source.name == "COMMANDLINE" and param.opts:
            given.append(param.opts[0])
    return given
