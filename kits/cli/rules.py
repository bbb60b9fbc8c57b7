"""`kit rules`: write the stall rule as Prometheus rules, with a Grafana dashboard beside them.

Thin: thresholds come from the kit (stall_after_s, idle_gpu_perc) unless a flag says
otherwise; the PromQL is made by `stallkit.monitor.prometheus.rules`. With `--out DIR` it writes
`stallkit-rules.yml` and `stallkit-dashboard.json` there, else it prints the rules. With
`--backtest` it evaluates the alerts over a Prometheus's history instead (`stallkit.kits.cli.rules_backtest`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stallkit.contract.errors import validation_message
from stallkit.kits.cli.common import fail, user_errors
from stallkit.kits.cli.fields import field_help, field_option, flags_by_field
from stallkit.monitor import RulesSettings

RULES_FILE = "stallkit-rules.yml"
DASHBOARD_FILE = "stallkit-dashboard.json"
RULES_HELP = (
    "Write the stall rule as Prometheus recording and alerting rules over the engines' own "
    "series (vLLM's, or with --dialect SGLang's, llama.cpp's, TGI's) "
    "and DCGM's GPU utilisation (EngineStalled, EngineMetricsDown, and StallkitDetectedStall "
    "on stallkit's exporter), plus a Grafana dashboard with --out."
)


@user_errors
def rules(
    ctx: typer.Context,
    kit: Annotated[
        str, typer.Option("--kit", "-k", help="Kit whose thresholds to use (name or .toml path).")
    ] = "restore-stall",
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help=f"Directory for {RULES_FILE} and {DASHBOARD_FILE}."),
    ] = None,
    stall_after: Annotated[
        float | None,
        typer.Option(help=field_help(RulesSettings, "stall_after_s", "Default: the kit's.")),
    ] = None,
    idle_gpu: Annotated[
        float | None,
        typer.Option(help=field_help(RulesSettings, "idle_gpu_perc", "Default: the kit's.")),
    ] = None,
    down_after: float = field_option(RulesSettings, "down_after_s", "--down-after"),
    scrape_interval: float = field_option(RulesSettings, "scrape_interval_s", "--scrape-interval"),
    eval_interval: float = field_option(RulesSettings, "evaluation_interval_s", "--eval-interval"),
    engine_selector: str = field_option(RulesSettings, "engine_selector"),
    gpu_selector: str = field_option(RulesSettings, "gpu_selector"),
    gpu_match: str = field_option(RulesSettings, "gpu_match_labels", "--gpu-match"),
    dialect: Annotated[
        str,
        typer.Option(
            "--dialect",
            metavar="NAMES",
            help="The engines' metric dialects, comma-separated (vllm, sglang, llamacpp, tgi) "
            "or all: one pair of rule groups each, so one file watches a mixed fleet.",
        ),
    ] = "vllm",
    no_gpu: Annotated[
        bool,
        typer.Option("--no-gpu", help="No DCGM series: judge on engine metrics alone (said so)."),
    ] = False,
    backtest: Annotated[
        bool,
        typer.Option(
            "--backtest",
            help="Evaluate the alerts over a history (--prometheus, --from, --to): when each "
            "would have fired, written to alerts.jsonl in --out beside a `kit backtest` report.",
        ),
    ] = False,
    prometheus: Annotated[
        str | None, typer.Option("--prometheus", metavar="URL", help="With --backtest.")
    ] = None,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file",
            help="With --backtest, instead of --prometheus: a recorded history (OpenMetrics "
            "with timestamps, or a timeline.jsonl) served by a Prometheus of its own.",
        ),
    ] = None,
    start: Annotated[str | None, typer.Option("--from", help="With --backtest.")] = None,
    end: Annotated[str, typer.Option("--to", help="With --backtest.")] = "now",
    group_by: Annotated[
        str, typer.Option("--group-by", help="With --backtest: the label naming an engine.")
    ] = "instance",
) -> None:
    """Write the stall rule as Prometheus rules (and a Grafana dashboard with --out)."""
    from pydantic import ValidationError

    from stallkit.kits.kit import load_kit
    from stallkit.monitor import rules_yaml

    monitor = load_kit(kit, {}).monitor
    try:
        settings = RulesSettings(
            stall_after_s=stall_after if stall_after is not None else monitor.stall_after_s,
            down_after_s=down_after,
            idle_gpu_perc=idle_gpu if idle_gpu is not None else monitor.idle_gpu_perc,
            gpu_window_s=monitor.gpu_window_s,
            scrape_interval_s=scrape_interval,
            evaluation_interval_s=eval_interval,
            engine_selector=engine_selector,
            gpu=not no_gpu,
            gpu_selector=gpu_selector,
            gpu_match_labels=gpu_match,
            dialects=_dialects(dialect),
        )
    except ValidationError as exc:
        message = validation_message(exc, names=flags_by_field(ctx, RulesSettings))
        raise fail(f"invalid {message}", "see `kit rules --help`") from None
    given = {"--prometheus": prometheus, "--from-file": from_file, "--from": start}
    strays = [flag for flag, value in given.items() if value is not None]
    if strays and not backtest:  # silently writing rules instead would ignore them
        raise fail(f"{', '.join(strays)} apply with --backtest", "add --backtest, or drop them")
    if backtest:
        from stallkit.kits.cli.rules_backtest import rules_backtest

        rules_backtest(settings, prometheus, from_file, start, end, group_by, out)
        return
    text = rules_yaml(settings)
    if out is None:
        typer.echo(text, nl=False)
    else:
        _write(out, text)


def _dialects(value: str) -> tuple[str, ...]:
    """`--dialect`'s names (`all`: every dialect), checked by the settings' model."""
    from stallkit.contract.names import DIALECT_NAMES

    listed = tuple(dict.fromkeys(p.strip().lower() for p in value.split(",") if p.strip()))
    unknown = [name for name in listed if name not in DIALECT_NAMES]
    if listed != ("all",) and (unknown or not listed):
        said = f"unknown metric dialect {unknown[0]!r}" if unknown else "--dialect names none"
        said = "--dialect all names every dialect: give it alone" if "all" in listed else said
        raise fail(said, f"one of: {', '.join(DIALECT_NAMES)}, comma-separated; or all")
    return DIALECT_NAMES if listed == ("all",) else listed


def _write(out: Path, text: str) -> None:
    """The rules and the shipped dashboard into `out`."""
    from importlib import resources

    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / RULES_FILE).write_text(text, encoding="utf-8")
        dashboard = resources.files("stallkit.monitor") / "grafana" / DASHBOARD_FILE
        (out / DASHBOARD_FILE).write_text(dashboard.read_text(encoding="utf-8"), encoding="utf-8")
    except OSError as exc:
        raise fail(
            f"cannot write to {out}: {exc.strerror or exc}", "choose a writable --out"
        ) from None
    typer.echo(f"wrote {out / RULES_FILE} and {out / DASHBOARD_FILE}")


def register(app: typer.Typer) -> None:
    """Add `kit rules` to the top-level app."""
    app.command("rules", help=RULES_HELP)(rules)
