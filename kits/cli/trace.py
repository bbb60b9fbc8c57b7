"""`kit trace`: look into a trace, write a run or a kit's workload as one.

Thin: the formats are `stallkit.contract.trace`'s, the numbers `stallkit.loadgen.traces.stats`', the conversions
`stallkit.loadgen.traces.export`'s. Replaying a trace is `[load] trace` in a kit, or `kit load --trace`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stallkit.kits.cli.common import fail, help_when_bare, user_errors

if TYPE_CHECKING:
    from stallkit.loadgen import TraceStats

TRACE_HELP = (
    "Traces: mooncake_trace JSONL (AIPerf's: timestamp or delay in ms, input_length, "
    "output_length, hash_ids of fixed-size blocks, session_id, text_input) and sessions JSONL "
    "(agentic calls: session_id, timestamp or delay, prompt_tokens, completion_tokens, "
    "cached_tokens). Replay one with `[load] trace` in a kit or `kit load --trace`."
)

trace_app = typer.Typer(help=TRACE_HELP, invoke_without_command=True, callback=help_when_bare)

_BLOCK = typer.Option(
    "--block-size", min=1, help="Tokens per hash_ids block (AIPerf's --isl-block-size)."
)


@trace_app.command(short_help="Lengths, sessions, span and prefix-cache hits of a trace.")
@user_errors
def stats(
    file: Annotated[Path, typer.Argument(help="A trace file (JSONL).")],
    block_size: Annotated[int, _BLOCK] = 512,
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as JSON.")] = False,
) -> None:
    """Input/output length distributions, session lengths, the span from the first to the last
    arrival, and the prefix-cache hits of an unbounded cache two ways: token-weighted over the
    whole trace (what an engine's counters report) and the per-request mean AIPerf's
    analyze-trace prints."""
    from rich.console import Console
    from rich.table import Table

    from stallkit.contract.trace import read_trace
    from stallkit.loadgen import trace_stats

    numbers = trace_stats(read_trace(file), block_size)
    if as_json:
        typer.echo(numbers.model_dump_json(indent=2))
        return
    table = Table(title=f"{file} ({numbers.format})", show_edge=False)
    for column in ("", "min", "mean", "p50", "p90", "p99", "max"):
        table.add_column(column, justify="right" if column else "left")
    for name, dist in (
        ("turns per session", numbers.turns_per_session),
        ("input tokens", numbers.input_tokens),
        ("output tokens", numbers.output_tokens),
    ):
        cells = [dist.min, dist.mean, dist.p50, dist.p90, dist.p99, dist.max]
        table.add_row(name, *(f"{v:,.0f}" if v >= 10 else f"{v:.1f}" for v in cells))
    console = Console()
    console.print(table)
    console.print(_totals(numbers), highlight=False)


def _totals(numbers: TraceStats) -> str:
    """The lines under the table: counts, span, and both prefix-cache hit figures, named."""
    per_request = numbers.cache_hit_rate_per_request
    aiperf = "   n/a" if per_request is None else f"{per_request:6.1%}"
    return (
        f"{numbers.requests:,} requests in {numbers.sessions:,} sessions, "
        f"{numbers.span_s:,.1f} s from first to last arrival; "
        f"{numbers.input_tokens_total:,} input and {numbers.output_tokens_total:,} output tokens\n"
        f"prefix-cache hits of an unbounded cache, {numbers.block_tokens}-token blocks:\n"
        f"  {numbers.cache_hit_share:6.1%}  token-weighted, whole trace (stallkit; as engine "
        "counters and a run's cached share count)\n"
        f"  {aiperf}  per-request mean (AIPerf analyze-trace's cache hit rate)"
    )


@trace_app.command(short_help="Write a run's turns as a mooncake_trace.")
@user_errors
def export(
    run_dir: Annotated[Path, typer.Argument(help="An arm's directory (holding turns.jsonl).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The trace file to write.")],
    block_size: Annotated[int, _BLOCK] = 512,
) -> None:
    """Write the run's turns as a mooncake_trace, hash_ids from the prompts' blocks.

    One session per conversation, its first turn at its timestamp, later turns a delay after
    the previous one ended. A failed try is left out (it added nothing to its conversation)
    unless it was its conversation's last, such as a request a stall held. Replay it with
    stallkit against another engine, or with AIPerf.
    """
    from stallkit.contract.files import TURNS_FILE
    from stallkit.contract.records import read_records
    from stallkit.contract.trace import write_trace
    from stallkit.loadgen import mooncake_lines

    if not (run_dir / TURNS_FILE).is_file():
        arms = sorted(p.name for p in run_dir.glob(f"*/{TURNS_FILE}"))
        hint = "name an arm's directory" + (f" (here: {', '.join(arms)})" if arms else "")
        raise fail(f"{run_dir} holds no {TURNS_FILE}", hint)
    records = read_records(run_dir)
    lines = mooncake_lines(records, block_size)
    written = write_trace(out, lines)
    left = len(records) - written
    typer.echo(f"{out}: {written} requests" + (f" ({left} failed tries left out)" if left else ""))


@trace_app.command(short_help="Write a kit's synthetic workload as a sessions trace.")
@user_errors
def generate(
    out: Annotated[Path, typer.Option("--out", "-o", help="The trace file to write.")],
    kit: Annotated[
        str,
        typer.Option("--kit", "-k", metavar="KIT", help="Kit name (shipped) or path to a .toml."),
    ] = "restore-stall",
    seed: Annotated[int | None, typer.Option(help="Workload seed (default: the kit's).")] = None,
    turns: Annotated[int, typer.Option(min=1, help="Turns per agent.")] = 200,
) -> None:
    """The kit's agents (sizes, replies, pauses, session restarts) as a sessions trace.

    Replayed with the kit's settings, it gives the kit's own requests: a kit's workload to
    edit, to hand to another tool, or to test trace replay with.
    """
    from stallkit.contract.trace import write_trace
    from stallkit.kits.kit import load_kit
    from stallkit.loadgen import workload_calls

    overrides = {} if seed is None else {"load.seed": seed}
    load = load_kit(kit, overrides).load
    written = write_trace(out, workload_calls(load, turns))
    typer.echo(f"{out}: {written} calls of {load.agents} agents (seed {load.seed})")


def register(app: typer.Typer) -> None:
    """Add `kit trace` (stats, export, generate) to the top-level app."""
    app.add_typer(trace_app, name="trace")
