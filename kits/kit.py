"""Kits: TOML files validated by one frozen model per concern.

A kit names the engine profile (GPUs, environment for images, ports, start-up timeout,
extra docker and engine arguments), the simulator sizes and time scale (used by `sim:*`
arms), the load, the monitor and the report's log patterns. Durations in a kit are engine
seconds; `stallkit.kits.arm.wall` divides them by the simulator's time scale before handing them on.
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from stallkit.contract.errors import (
    closest_key,
    is_unknown_key,
    read_text,
    validation_location,
    validation_message,
)
from stallkit.contract.flags import Flag
from stallkit.contract.gpu import GpuSource, GpuSourceError, GpuSourceField
from stallkit.contract.slo import SloConfig, VerdictConfig
from stallkit.engine import SimConfig, TwinConfig, renamed_plugin_path
from stallkit.kits.errors import KitError, OverrideError
from stallkit.loadgen import LoadConfig, sizes_for_unset, trace_replay
from stallkit.monitor import MonitorConfig

_FROZEN = ConfigDict(frozen=True, extra="forbid")
#: the arms' names: `kit ab`'s two, `kit run`'s one
_ARM_NAMES = ("base", "fix", "run")
#: the kits shipped in the package
KITS_DIR = Path(__file__).parent / "shipped"


class DockerHost(BaseModel):
    """Where an image arm runs: a docker host, and how its engine and GPU telemetry are reached."""

    model_config = _FROZEN
    docker_host: str = Field(
        "",
        description="DOCKER_HOST URL (unix://, tcp://, ssh://user@gpu-box) or a docker context name; empty: the default",
    )
    host_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="loopback port the engine is reached on (forwarded from a remote host); 0: a free one",
    )
    dcgm_url: str = Field(
        "",
        description="the host's DCGM exporter as reached from here; {engine_url} is replaced; empty: the kit's GPUs",
    )

    @field_validator("dcgm_url")
    @classmethod
    def _dcgm_form(cls, value: str) -> str:
        # checked here, not when the engine is already up and the monitor asks for it
        if value:
            try:
                GpuSource("dcgm", url=value.replace("{engine_url}", "http://127.0.0.1:1"))
            except GpuSourceError as exc:
                raise ValueError(f"{exc.message} ({exc.hint})") from None
        return value

    @field_validator("docker_host")
    @classmethod
    def _host_form(cls, value: str) -> str:
        scheme, sep, rest = value.partition("://")
        if sep and (scheme not in ("unix", "tcp", "ssh", "fd", "npipe") or not rest):
            raise ValueError(
                f"docker_host {value!r}: use unix://, tcp:// or ssh://, or a context name"
            )
        if not sep and value and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$", value):
            raise ValueError(f"docker_host {value!r} is neither a URL nor a context name")
        return value


class EngineProfile(BaseModel):
    """How to start a real engine (docker image or local vLLM) for an arm."""

    model_config = _FROZEN
    gpus: list[int] = Field(default_factory=list, description="GPU indices given to the engine")
    arm_gpus: dict[str, list[int]] = Field(
        default_factory=dict,
        description="per-arm GPU indices (arm name -> indices), e.g. to run --parallel on disjoint sets",
    )
    env: dict[str, str] = Field(default_factory=dict, description="environment passed to the image")
    port: int = Field(
        8000, ge=1, le=65535, description="port the engine listens on in the container"
    )
    startup_timeout_s: float = Field(1200.0, gt=0, description="wall seconds to wait for /health")
    shm_size: str = Field("16g", description="docker --shm-size")
    ipc_host: bool = Field(
        True, description="docker --ipc=host (NCCL between tensor-parallel ranks)"
    )
    docker_args: list[str] = Field(default_factory=list, description="extra `docker run` arguments")
    network: str = Field(
        "",
        description="docker --network; `host`: no --publish, the engine listens on a free loopback port",
    )
    time_scale: float = Field(
        1.0,
        gt=0,
        le=10_000,
        description="engine seconds per wall second of image arms: 1 for real engines; a simulator image runs at this scale",
    )
    host: DockerHost = Field(
        default_factory=DockerHost, description="the docker host of image arms"
    )
    arm_hosts: dict[str, DockerHost] = Field(
        default_factory=dict,
        description="per-arm docker hosts (arm name -> host), e.g. base on one box and fix on another",
    )
    engine_args: list[str] = Field(
        default_factory=list,
        description="arguments after the image, or to `vllm serve` for vllm: arms",
    )
    arm_engine_args: dict[str, list[str]] = Field(
        default_factory=dict,
        description="per-arm engine arguments appended to engine_args (arm name -> arguments), "
        "e.g. the patched scheduler's policy for each arm of one stock image",
    )

    @field_validator("engine_args")
    @classmethod
    def _no_old_plugin_path(cls, args: list[str]) -> list[str]:
        for arg in args:
            renamed = renamed_plugin_path(arg)
            if renamed is not None:
                raise ValueError(f"{renamed}: write the new path in the kit")
        return args

    @field_validator("arm_engine_args")
    @classmethod
    def _no_old_plugin_path_per_arm(cls, args: dict[str, list[str]]) -> dict[str, list[str]]:
        for arm_args in args.values():
            cls._no_old_plugin_path(arm_args)
        return args

    def gpus_for(self, arm: str) -> list[int]:
        """The GPUs an arm runs on."""
        return self.arm_gpus.get(arm, self.gpus)

    def host_for(self, arm: str) -> DockerHost:
        """The docker host an image arm runs on."""
        return self.arm_hosts.get(arm, self.host)

    def engine_args_for(self, arm: str) -> list[str]:
        """The engine arguments of an arm: the shared ones, then the arm's own."""
        return [*self.engine_args, *self.arm_engine_args.get(arm, [])]


class SimSection(BaseModel):
    """The embedded simulator, for `sim:base` / `sim:fix` arms."""

    model_config = _FROZEN
    time_scale: Annotated[
        float,
        Flag(
            "--time-scale",
            note="Used by sim: arms on the wall clock (`kit run`, `kit ab --clock wall`).",
        ),
    ] = Field(30.0, gt=0, le=10_000, description="engine seconds per wall second")
    engine: SimConfig = Field(default_factory=SimConfig, description="simulated engine sizes")
    step_cost_scale: dict[str, float] = Field(
        default_factory=dict,
        description="per-arm factor on the simulator's step cost (arm name -> factor), e.g. "
        "{fix = 1.3}: that arm's every step and restore takes 1.3 times as long, on both clocks",
        exclude_if=lambda value: not value,  # absent from kit.json unless set
    )

    @field_validator("step_cost_scale")
    @classmethod
    def _scale_per_arm(cls, value: dict[str, float]) -> dict[str, float]:
        for arm, factor in value.items():
            if arm not in _ARM_NAMES:
                raise ValueError(f"{arm!r} is not an arm; name one of {', '.join(_ARM_NAMES)}")
            if not 0 < factor <= 100:
                raise ValueError(f"{arm} = {factor:g}: a factor is above 0 and at most 100")
        return value

    def engine_for(self, arm: str) -> SimConfig:
        """The simulated engine of one arm: `engine`, its step cost scaled by the arm's factor."""
        factor = self.step_cost_scale.get(arm)
        if factor is None:
            return self.engine
        return self.engine.model_copy(update={"cost": self.engine.cost.scaled(factor)})


class PatchedSection(BaseModel):
    """The patched engine, for `patched:base` / `patched:fix` arms (a local vLLM with the plugin)."""

    model_config = _FROZEN
    model: str | None = Field(
        None,
        description="model directory the arms serve unless the spec names one; "
        "${VAR} expands from the environment",
    )
    prefill_compute_share: float = Field(
        0.4, gt=0, lt=1, description="prefill's share of scheduler compute time"
    )
    async_scheduling: bool | None = Field(
        None,
        description="async scheduling (AsyncPatchedScheduler); default: on when the arm has GPUs",
    )


def _twin_field(name: str, *, note: str = "", **changes: Any) -> Any:
    """The twin's own field `name` for the kit's `[twin]` (its default, bounds and description:
    written once, in TwinConfig); `changes` replace some (a default of None: the twin's), `note`
    adds a sentence on what the kit's key does besides."""
    field = TwinConfig.model_fields[name]
    description = str(field.description)
    if note:
        description = f"{description.rstrip('.')}. {note}"
    return FieldInfo.merge_field_infos(field, description=description, **changes)


#: the twin's settings of the host tier behind a --kv-transfer-config
_KV_FIELDS = ("kv_link_latency_s", "kv_seconds_per_block", "kv_host_blocks", "kv_load_fail_every")
_KV_NOTE = "Read with a --kv-transfer-config in [engine] engine_args."


class TwinSection(BaseModel):
    """The twin, for `twin:` arms: vLLM's own scheduler class on the engine's clock.

    Its sizes are vLLM's flags in `[engine] engine_args` (`--max-num-seqs`, `--block-size`,
    `--num-gpu-blocks-override`, `--max-model-len`, `--max-num-batched-tokens`), else the
    simulator's (`[sim.engine]`), so one kit sizes its real, simulated and twin arms alike.
    """

    model_config = _FROZEN
    calibration: str = Field(
        "seed-gpu-tp2",
        description="the step cost: a shipped calibration's name (seed-gpu-tp2, tiny-vllm-cpu) "
        "or the path of a file written by `kit engine calibrate`",
    )
    empty_step_s: float | None = _twin_field(
        "empty_step_s", default=None, note="Default: the calibration's."
    )
    skip_empty_steps: bool = _twin_field("skip_empty_steps")
    async_scheduling: Literal["auto", "on", "off"] = _twin_field("async_scheduling")
    layers: str | None = _twin_field("layers")
    overlay: str | None = _twin_field("overlay")
    arm_overlay: dict[str, str] = Field(
        default_factory=dict, description="per-arm overlay (arm name -> tree), over `overlay`"
    )
    additional_config: dict[str, Any] = _twin_field(
        "additional_config", note="For a `twin:MODULE:CLASS` scheduler."
    )
    kv_link_latency_s: float = _twin_field("kv_link_latency_s", note=_KV_NOTE)
    kv_seconds_per_block: float = _twin_field("kv_seconds_per_block", note=_KV_NOTE)
    kv_host_blocks: int = _twin_field(
        "kv_host_blocks", note=f"{_KV_NOTE} Replaces the connector's cpu_bytes_to_use."
    )
    kv_load_fail_every: int = _twin_field("kv_load_fail_every", note=_KV_NOTE)

    @field_validator("kv_link_latency_s", "kv_seconds_per_block")
    @classmethod
    def _link_moves_blocks(cls, value: float) -> float:
        # an endless link never moves a block: every store and load would wait forever, and a
        # case would read as an engine that never stalls
        if not math.isfinite(value):
            raise ValueError(f"{value} engine seconds: the host link could never move a block")
        return value

    def kv_settings(self) -> dict[str, float | int]:
        """The host tier's settings, for the twin's config (read with a --kv-transfer-config)."""
        return self.model_dump(include=set(_KV_FIELDS))

    def overlay_for(self, arm: str) -> str | None:
        """The source tree an arm's worker imports vLLM from (None: the installed one)."""
        return self.arm_overlay.get(arm, self.overlay)


class KitMonitor(MonitorConfig):
    """The monitor's settings plus where its GPU readings come from."""

    gpu_source: GpuSourceField = Field(
        GpuSource("auto"),
        description="auto (the launcher's, else the engine's own DCGM page), none, nvml:0,1, smi:0,1 or dcgm:URL",
    )


class ReportSettings(BaseModel):
    """What the A/B table counts in engine logs."""

    model_config = _FROZEN
    log_patterns: dict[str, str] = Field(
        default_factory=dict, description="row name -> regular expression counted per log line"
    )

    @field_validator("log_patterns")
    @classmethod
    def _compile(cls, value: dict[str, str]) -> dict[str, str]:
        for name, rx in value.items():
            try:
                re.compile(rx)
            except re.error as exc:
                raise ValueError(
                    f"log pattern {name!r} is not a valid regular expression: {exc}"
                ) from None
        return value


class Kit(BaseModel):
    """A whole kit: what `kit run` and `kit ab` need besides the engine specs."""

    model_config = _FROZEN
    name: str = Field(description="short name, used in run directory names")
    description: str = Field("", description="what the kit reproduces")
    engine: EngineProfile = Field(default_factory=EngineProfile)
    sim: SimSection = Field(default_factory=SimSection)
    patched: PatchedSection = Field(default_factory=PatchedSection)
    twin: TwinSection = Field(default_factory=TwinSection)
    load: LoadConfig = Field(default_factory=LoadConfig)
    monitor: KitMonitor = Field(default_factory=KitMonitor)
    report: ReportSettings = Field(default_factory=ReportSettings)
    slo: SloConfig | None = Field(
        None,
        description="service-level objectives: goodput, attainment and latency percentiles "
        "per arm in the A/B report (unset: no SLO rows)",
        exclude_if=lambda value: value is None,
    )
    verdict: VerdictConfig | None = Field(
        None,
        description="the non-inferiority test beside the stall test (needs [slo]; default with "
        "[slo]: goodput, ttft_p99 and throughput at a 5 % margin)",
        exclude_if=lambda value: value is None,
    )

    @field_validator("load")
    @classmethod
    def _runnable_load(cls, load: LoadConfig) -> LoadConfig:
        # the load's own model allows an endless run (`kit load` may run until stopped); a
        # kit's run must end
        if load.duration_s is not None and not math.isfinite(load.duration_s):
            raise ValueError("duration_s: must be a finite number of engine seconds")
        return load

    @model_validator(mode="after")
    def _needs_duration(self) -> Self:
        if self.load.duration_s is None:
            raise ValueError("load.duration_s must be set in a kit")
        if self.verdict is not None and self.slo is None:
            raise ValueError("verdict: needs an [slo] section (its warm-up and objectives)")
        return self


def shipped_kits() -> list[str]:
    """Names of the kits shipped in the package."""
    return sorted(p.stem for p in KITS_DIR.glob("*.toml"))


def _kit_text(name_or_path: str) -> tuple[str, str]:
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        try:
            return read_text(path, KitError), str(path)
        except OSError as exc:
            raise KitError(
                f"cannot read kit {name_or_path}: {exc.strerror}", "check the path"
            ) from None
    resource = KITS_DIR / f"{name_or_path}.toml"
    if not resource.is_file():
        raise KitError(
            f"no kit named {name_or_path!r}", "shipped kits: " + ", ".join(shipped_kits())
        )
    return resource.read_text(encoding="utf-8"), f"{name_or_path}.toml"


def _line_of(text: str, loc: tuple[int | str, ...]) -> int | None:
    """Line of the TOML key at `loc` (table path then key), for error messages."""
    keys = [str(k) for k in loc if isinstance(k, str)]
    if not keys:
        return None
    table = ".".join(keys[:-1])
    in_table = table == ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("["):
            in_table = stripped.strip("[]").strip() == table
            continue
        if in_table and re.match(rf"^\"?{re.escape(keys[-1])}\"?\s*=", stripped):
            return number
    return None


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in nested dicts (command-line overrides of kit values)."""
    *parents, last = dotted.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


#: load settings that only a trace replay reads
_TRACE_ONLY_KEYS = {
    "load.trace_auto_offset",
    "load.trace_start_offset_ms",
    "load.trace_end_offset_ms",
    "load.trace_salt",
}


#: where every kit key is described (kit.json's schema is the kit's model)
KIT_KEYS_AT = "every kit key: kit schema --out DIR, then kit.schema.json"


def unknown_key_hint(exc: ValidationError) -> str:
    """`did you mean load.agents? ...` for a kit key that is not one; empty for any other
    problem."""
    if not is_unknown_key(exc):
        return ""
    key = ".".join(str(part) for part in validation_location(exc))
    near = closest_key(Kit, key)
    return f"did you mean {near}? ({KIT_KEYS_AT})" if near else KIT_KEYS_AT


def load_kit(name_or_path: str, overrides: dict[str, Any] | None = None) -> Kit:
    """Read, override and validate a kit; one KitError naming the key and line on failure."""
    text, origin = _kit_text(name_or_path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KitError(
            f"{origin} is not valid TOML: {exc}", "fix the syntax at that line"
        ) from None
    for dotted, value in (overrides or {}).items():
        set_dotted(data, dotted, value)
    data.setdefault("name", Path(origin).stem)
    load = data.get("load")
    if isinstance(load, dict):  # a default the kit never set never refuses it
        data["load"] = sizes_for_unset(load) | load
    try:
        kit = Kit.model_validate(data)
    except ValidationError as exc:
        loc = validation_location(exc)
        key = ".".join(str(k) for k in loc)
        message = validation_message(exc)
        # an override is to blame for its own field, or for a check of its table that names it
        blamed = [
            k
            for k in overrides or {}
            if k == key
            or (k.startswith(key + ".") and re.search(rf"\b{k.rsplit('.', 1)[-1]}\b", message))
        ]
        if blamed:
            # the bad value came from the command line, not from the kit's text; a check of
            # its table that starts with its field (`load: agents: ...`) is placed at the field
            field = f"{key}: {blamed[0].rsplit('.', 1)[-1]}: "
            if len(blamed) == 1 and message.startswith(field):
                message = f"{blamed[0]}: {message[len(field) :]}"
            raise OverrideError(blamed, message, unknown_key_hint(exc)) from None
        line = _line_of(text, loc)
        where = f"{origin}:{line}" if line else origin
        raise KitError(
            f"{where}: {validation_message(exc, default='(kit)')}",
            unknown_key_hint(exc) or f"see the shipped kits; {KIT_KEYS_AT}",
        ) from None
    given_keys = set(overrides or {})
    if kit.load.trace is None:
        stray = sorted(given_keys & _TRACE_ONLY_KEYS)
        if stray:  # a window or salt with nothing to replay would be silently ignored
            raise OverrideError(
                stray, f"{stray[0]}: applies to a trace replay only; give a trace (--trace)"
            )
        return kit
    # a kit's trace is found beside the kit; one given on the command line, from here
    given = "load.trace" in (overrides or {})
    shipped = origin == f"{name_or_path}.toml"
    base = Path.cwd() if given else KITS_DIR if shipped else Path(origin).parent
    load = kit.load.model_copy(update={"trace": str((base / kit.load.trace).resolve())})
    # a trace that does not parse, or a window that holds none of it, stops the command
    # before anything runs; one agent per session is what runs, so it is what the kit says
    replay = trace_replay(load)
    assert replay is not None
    if "load.agents" in given_keys and kit.load.agents != replay.sessions:
        raise OverrideError(
            ["load.agents"],
            f"load.agents: a trace runs one agent per session ({replay.sessions} in this "
            "trace); drop it, or cut the trace with its window",
        )
    return kit.model_copy(update={"load": load.model_copy(update={"agents": replay.sessions})})
