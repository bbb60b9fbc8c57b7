"""GPU utilisation: one reader interface, built from a typed GPU-source spec.

`nvml:0,1` reads local GPUs through nvidia-ml-py, `smi:0,1` runs `nvidia-smi`, `dcgm:URL`
scrapes a DCGM exporter's `/metrics` (remote GPUs; the simulator serves this format), and
`none` watches no GPU, so the detector runs on metrics alone (the spec and its text form are
`stallkit.contract.gpu.GpuSource`). A configured source that cannot read at start (missing bindings or
binary, no driver, no such GPU, unreachable exporter) raises `MonitorError`: it never
silently becomes `none`. After a good start a failed read is data (`GpuReading.error`), like
a failed scrape. A DCGM page's power draw and SM activity, where it has them, are kept as
the reader's `activity` after each reading (`stallkit.monitor.signals.activity`); the other
sources have none.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families

from stallkit.contract import names
from stallkit.contract.errors import failure_words
from stallkit.contract.gpu import SPEC_HINT, GpuSource, GpuSourceError
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.signals.activity import GpuActivity, parse_dcgm_activity

SMI_QUERY = (
    "--query-gpu=index,utilization.gpu,memory.used",
    "--format=csv,noheader,nounits",
)


class GpuReader(Protocol):
    """Reads GPU utilisation from one source; `start()` proves it works before a run."""

    @property
    def checked(self) -> bool:
        """Whether this source watches GPUs at all (False only for `none`)."""
        ...

    @property
    def label(self) -> str:
        """The spec's text form it was built from, for display."""
        ...

    @property
    def activity(self) -> GpuActivity | None:
        """Power draw and SM activity at the last reading (None: this source has none)."""
        ...

    async def start(self) -> dict[str, float]:
        """Open the source and take a first reading; raise `MonitorError` if it cannot."""
        ...

    async def read(self) -> dict[str, float]:
        """Utilisation (%) per watched GPU index; raise `MonitorError` on failure."""
        ...

    async def close(self) -> None:
        """Release whatever the source holds."""
        ...


def _pick(found: dict[str, float], wanted: list[str], label: str) -> dict[str, float]:
    if not wanted:
        if not found:
            raise MonitorError(f"{label}: no GPU found")
        return found
    missing = [i for i in wanted if i not in found]
    if missing:
        raise MonitorError(
            f"{label}: no GPU {','.join(missing)} (found {','.join(found) or 'none'})"
        )
    return {i: found[i] for i in wanted}


class NoGpu:
    """Watch no GPU: the detector decides on metrics alone and says so."""

    checked = False
    label = "none"
    activity: GpuActivity | None = None

    async def start(self) -> dict[str, float]:
        return {}

    async def read(self) -> dict[str, float]:
        return {}

    async def close(self) -> None:
        return None


def parse_smi_csv(text: str) -> dict[str, float]:
    """Utilisation per index from `nvidia-smi --query-gpu=index,utilization.gpu,...` CSV."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 2 or not cells[0]:
            continue
        try:
            out[cells[0]] = float(cells[1])
        except ValueError:
            continue  # "[N/A]" or "[Not Supported]": no utilisation for that GPU
    return out


class SmiGpu:
    """Runs `nvidia-smi` once per reading (local GPUs without Python bindings)."""

    checked = True
    activity: GpuActivity | None = None

    def __init__(self, indices: list[str], label: str, timeout_s: float) -> None:
        self._indices = indices
        self.label = label
        self._timeout_s = timeout_s

    async def read(self) -> dict[str, float]:
        try:
            proc = await asyncio.create_subprocess_exec(
                "nvidia-smi",
                *SMI_QUERY,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise MonitorError(f"{self.label}: cannot run nvidia-smi: {exc}") from None
        try:
            # not wait_for: on Python 3.11 it can swallow the monitor's own cancellation
            async with asyncio.timeout(self._timeout_s):
                out, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise MonitorError(f"{self.label}: nvidia-smi timed out") from None
        if proc.returncode != 0:
            detail = (err or out).decode(errors="replace").strip().splitlines()
            raise MonitorError(
                f"{self.label}: nvidia-smi failed (exit {proc.returncode}): "
                f"{detail[0] if detail else 'no output'}"
            )
        return _pick(parse_smi_csv(out.decode(errors="replace")), self._indices, self.label)

    async def start(self) -> dict[str, float]:
        return await self.read()

    async def close(self) -> None:
        return None


class NvmlGpu:
    """Local GPUs through nvidia-ml-py (`pynvml`), by index."""

    checked = True
    activity: GpuActivity | None = None

    def __init__(self, indices: list[str], label: str) -> None:
        self._indices = indices
        self.label = label
        self._nvml: Any = None
        self._handles: dict[str, Any] = {}

    async def start(self) -> dict[str, float]:
        try:
            import pynvml
        except ImportError:
            raise MonitorError(
                f"{self.label}: nvidia-ml-py is not installed",
                hint="pip install nvidia-ml-py, or use --gpu-source smi:0,1",
            ) from None
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            wanted = self._indices or [str(i) for i in range(count)]
            for index in wanted:
                if int(index) >= count:
                    raise MonitorError(f"{self.label}: no GPU {index} (found {count})")
                self._handles[index] = pynvml.nvmlDeviceGetHandleByIndex(int(index))
        except pynvml.NVMLError as exc:
            raise MonitorError(
                f"{self.label}: NVML failed: {exc}", hint="is an NVIDIA driver loaded?"
            ) from None
        self._nvml = pynvml
        return await self.read()

    async def read(self) -> dict[str, float]:
        nvml = self._nvml
        try:
            return {
                index: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu)
                for index, h in self._handles.items()
            }
        except nvml.NVMLError as exc:
            raise MonitorError(f"{self.label}: NVML read failed: {exc}") from None

    async def close(self) -> None:
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml = None


def parse_dcgm(text: str) -> dict[str, float]:
    """`DCGM_FI_DEV_GPU_UTIL` per `gpu` label from a DCGM exporter page."""
    lines = text.splitlines()
    wanted = "\n".join(x for x in lines if x.startswith(names.DCGM_GPU_UTIL))
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(wanted + "\n"):
            for sample in family.samples:
                if sample.name == names.DCGM_GPU_UTIL and "gpu" in sample.labels:
                    out[sample.labels["gpu"]] = float(sample.value)
    except ValueError as exc:
        raise MonitorError(f"malformed DCGM exporter text: {exc}") from None
    return out


class DcgmGpu:
    """A DCGM exporter's `/metrics` over HTTP (remote GPUs, or the simulator's)."""

    checked = True

    def __init__(self, url: str, label: str, timeout_s: float) -> None:
        self._url = url
        self.label = label
        self._client = httpx.AsyncClient(timeout=timeout_s)
        self._timeout_s = timeout_s
        self.activity: GpuActivity | None = None

    async def read(self) -> dict[str, float]:
        self.activity = None  # a failed reading leaves none, not the last one's
        try:
            response = await self._client.get(self._url)
            response.raise_for_status()
        except httpx.TimeoutException as exc:
            raise MonitorError(
                f"{self.label}: GET unanswered after {self._timeout_s:g} s ({type(exc).__name__})"
            ) from None
        except httpx.HTTPError as exc:
            raise MonitorError(failure_words(f"{self.label}: GET", exc)) from None
        util = parse_dcgm(response.text)
        if not util:
            raise MonitorError(f"{self.label}: no {names.DCGM_GPU_UTIL} series at {self._url}")
        self.activity = parse_dcgm_activity(response.text) or None
        return util

    async def start(self) -> dict[str, float]:
        return await self.read()

    async def close(self) -> None:
        await self._client.aclose()


#: where an engine that exports its own GPU utilisation serves the DCGM page (the simulator does)
ENGINE_DCGM_PATH = "/dcgm/metrics"


def probe_engine_dcgm(engine_url: str, timeout_s: float = 2.0) -> tuple[GpuSource, str]:
    """The GPU source `auto` picks for an engine, and why.

    `dcgm:URL` when the engine serves DCGM GPU utilisation at its DCGM path, else `none`. The
    reason is empty when the engine did not answer at all (the monitor reports that itself).
    """
    url = engine_url.rstrip("/") + ENGINE_DCGM_PATH
    try:
        response = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError:
        return GpuSource("none"), ""
    try:
        found = response.status_code == 200 and parse_dcgm(response.text)
    except MonitorError:
        found = False
    if found:
        return GpuSource("dcgm", url=url), "the engine serves DCGM"
    return GpuSource("none"), f"no DCGM page at {url}"


def resolve_gpu_source(
    asked: GpuSource, engine_url: str, known: GpuSource | None = None, *, timeout_s: float = 2.0
) -> tuple[GpuSource, str]:
    """The concrete GPU source for an engine, and why `auto` chose it (empty: nothing to say).

    The one place `auto` is resolved, for `kit monitor URL` and a run's arms alike. A source
    the user or the kit names is taken as it is. `auto` takes what the engine's launcher
    knows (`known`: the GPUs it pinned, the DCGM page it set up); where nothing is known
    (None, or `auto`: an engine someone else runs) it asks the engine (`probe_engine_dcgm`).
    """
    if asked.kind != "auto":
        return asked, ""
    if known is not None and known.kind != "auto":
        return known, ""
    return probe_engine_dcgm(engine_url, timeout_s)


def gpu_source(source: GpuSource | str, *, timeout_s: float = 5.0) -> GpuReader:
    """The reader for a GPU source (not started yet; call `start()`).

    A string is parsed first (`GpuSourceError` on a bad form); `auto` must have been resolved
    to a concrete source first (`resolve_gpu_source`).
    """
    spec = GpuSource.parse(source) if isinstance(source, str) else source
    label = str(spec)
    wanted = [str(g) for g in spec.gpus]
    if spec.kind == "none":
        return NoGpu()
    if spec.kind == "nvml":
        return NvmlGpu(wanted, label)
    if spec.kind == "smi":
        return SmiGpu(wanted, label, timeout_s)
    if spec.kind == "dcgm":
        return DcgmGpu(spec.url, label, timeout_s)
    raise GpuSourceError(
        "GPU source auto is not resolved here", "name the source: " + SPEC_HINT.removeprefix("use ")
    )
