"""`kit schema`: publish the JSON Schemas of a run directory's files, so other tools can read a run.

Thin: the schemas come from `stallkit.contract.schema`. Without `--out` it prints one JSON object
mapping each file's name to its schema (a JSONL file's schema is that of one line); with
`--out DIR` it writes one `NAME.schema.json` per file there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stallkit.kits.cli.common import fail, user_errors

SCHEMA_HELP = (
    "Print the JSON Schemas of a run directory's files (turns.jsonl, timeline.jsonl, meta.json, "
    "summary.json, kit.json, ab.json, a forensics bundle's manifest.json, a fleet's fleet.jsonl "
    "and a backtest's stalls.jsonl, backtest.json and alerts.jsonl) and of a corpus case's "
    "TOML file (case.schema.json), or write one NAME.schema.json per file with --out."
)


@user_errors
def schema(
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Directory for one NAME.schema.json per file."),
    ] = None,
) -> None:
    """Print the run directory's JSON Schemas, or write them with --out."""
    import json

    from stallkit.contract.schema import run_dir_schemas, schema_file_name, schema_text

    schemas = run_dir_schemas()
    if out is None:
        typer.echo(json.dumps(schemas, indent=2, sort_keys=True))
        return
    if out.exists() and not out.is_dir():
        raise fail(f"{out} is not a directory", "pass a directory for the schema files")
    try:
        out.mkdir(parents=True, exist_ok=True)
        for file_name, body in schemas.items():
            path = out / schema_file_name(file_name)
            path.write_text(schema_text(body), encoding="utf-8")
            typer.echo(str(path))
    except OSError as exc:
        raise fail(f"cannot write to {out} ({exc.strerror})", "pick a writable directory") from None


def register(app: typer.Typer) -> None:
    """Add `kit schema` to the command line."""
    app.command("schema", help=SCHEMA_HELP)(schema)
