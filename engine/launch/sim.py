"""Launch the embedded simulator as a child process on a free loopback port.

The child is `python -m stallkit.engine.serve`; it reports the port it bound on stdout, which this
launcher reads from the log file. Its GPU source is the simulator's DCGM-format endpoint.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stallkit.contract.gpu import GpuSource
from stallkit.engine.launch.base import ProcessLauncher
from stallkit.engine.spec import EngineSpec

_URL_RE = re.compile(r"stallkit-sim listening on (http://\S+)")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def dump_toml(data: Mapping[str, Any], prefix: str = "") -> str:
    """Write a nested mapping of scalars and lists as TOML (enough for simulator configs);
    TOML has no null: a None is left out, which reads back as the field's default."""
    lines = [
        f"{key} = {_toml_value(v)}"
        for key, v in data.items()
        if v is not None and not isinstance(v, Mapping)
    ]
    for key, value in data.items():
        if isinstance(value, Mapping):
            name = f"{prefix}{key}"
            lines.append(f"\n[{name}]")
            lines.append(dump_toml(value, prefix=name + "."))
    return "\n".join(line for line in lines if line) + "\n"


class SimLauncher(ProcessLauncher):
    """The simulator (`sim:base` / `sim:fix`) in its own process group."""

    url_pattern = _URL_RE

    def __init__(
        self,
        spec: EngineSpec,
        work_dir: Path,
        sim_config: Mapping[str, Any],
        time_scale: float,
        log_path: Path | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        config_path = work_dir / "sim-config.toml"
        config_path.write_text(dump_toml(sim_config), encoding="utf-8")
        argv = [
            sys.executable,
            "-m",
            "stallkit.engine.serve",
            "--policy",
            spec.target,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--time-scale",
            repr(float(time_scale)),
            "--config",
            str(config_path),
            *(extra_args or []),
        ]
        super().__init__(spec, argv, log_path or work_dir / "engine.log", grace_s=5.0)
        self.time_scale = time_scale

    @property
    def gpu_source(self) -> GpuSource:
        return GpuSource("dcgm", url=f"{self.url}/dcgm/metrics")
