"""Commands of the `kit` CLI for this role (placeholder until implemented)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the top-level app."""
