"""A config field's command-line flag, declared on the field itself.

A field that a command line sets carries its flag in its annotation,
`agents: Annotated[int, Flag("--agents")] = Field(12, description=...)`: the field's
description is the flag's help and its type the flag's, so the flag's name, help and type are
written once, beside the field. The command line (`stallkit.kits.cli.fields`) reads them with
`flag_of` and makes its options from them; the models stay free of the command-line library.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

__all__ = ["Flag", "flag_of"]


@dataclass(frozen=True)
class Flag:
    """The flag of the field it annotates.

    `name`: its long name, or `--x/--no-x` for a switch that may be set either way; `metavar`:
    the name help shows for its value (else its type's); `note`: a sentence the command line
    adds to the field's description.
    """

    name: str
    metavar: str | None = None
    note: str = ""

    @property
    def param_name(self) -> str:
        """The command's parameter the flag fills (`--min-context`: `min_context`)."""
        return self.name.split("/")[0].removeprefix("--").replace("-", "_")


def flag_of(model: type[BaseModel], name: str) -> Flag | None:
    """The flag the field `name` of `model` declares (None: it declares none)."""
    found = [m for m in model.model_fields[name].metadata if isinstance(m, Flag)]
    return found[0] if found else None
