"""Launch llama.cpp's server (`llamacpp:MODEL.gguf`) on 127.0.0.1, with its metrics page on.

The server is the binary `kit engine llamacpp build` keeps in the cache (or the one
`$STALLKIT_LLAMA_SERVER` names), run in its own process group on port 0: it binds a free port
and logs `listening on http://127.0.0.1:PORT`, which the launcher reads from the log.
`--metrics` turns on its Prometheus page (the `llamacpp:` family), and `--parallel` gives it
one slot per agent of the kit's load, each with room for the kit's largest context and reply,
so that the agents run side by side as they would on vLLM. The kit's engine arguments come
after, and any flag they set is not set by the launcher. The server is one process whose
threads do all the work: its CPU seconds tell a spinning server from a stopped one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import psutil

from stallkit.engine.errors import EngineError
from stallkit.engine.launch.base import ProcessLauncher
from stallkit.engine.launch.llamacpp.build import LLAMACPP_VERSION, SERVER_ENV, find_server
from stallkit.engine.spec import LlamacppSpec

__all__ = ["BUILD_HINT", "LlamacppLauncher", "check_llamacpp", "server_args"]

BUILD_HINT = (
    f"build it once with `kit engine llamacpp build` (llama-cpp-python {LLAMACPP_VERSION}'s "
    f"llama.cpp, cached), or name a llama-server binary in ${SERVER_ENV}"
)
_URL_RE = re.compile(r"listening on (http://[0-9.]+:[0-9]+)")
#: each flag the launcher sets, with its other spellings (a kit's own setting wins)
_ALIASES = {
    "--parallel": ("--parallel", "-np"),
    "--ctx-size": ("--ctx-size", "-c"),
    "--threads": ("--threads", "-t"),
    "--alias": ("--alias", "-a"),
}


def server_args(
    model: Path,
    *,
    slots: int,
    ctx_per_slot: int,
    engine_args: Sequence[str] = (),
    threads: int | None = None,
) -> list[str]:
    """llama-server's arguments (without the binary) for `model` on 127.0.0.1, port 0."""
    given = {arg.split("=", 1)[0] for arg in engine_args}
    defaults = {
        "--parallel": str(slots),
        "--ctx-size": str(slots * ctx_per_slot),
        "--threads": str(threads or max(1, min(4, os.cpu_count() or 1))),
        "--alias": model.stem,
    }
    args = ["--model", str(model), "--host", "127.0.0.1", "--port", "0", "--metrics", "--no-webui"]
    for flag, value in defaults.items():
        if not given & set(_ALIASES[flag]):
            args += [flag, value]
    return [*args, *engine_args]


def check_llamacpp(raw: str, model: str) -> tuple[Path, Path]:
    """What a llama.cpp arm needs before it starts: the server binary and the GGUF file.
    Returns both, resolved; EngineError with a hint if either is missing."""
    server = find_server()
    if server is None or not server.is_file():
        where = f" (${SERVER_ENV} names {server}, no file)" if server is not None else ""
        raise EngineError(f"{raw} needs llama.cpp's server, which is not built here{where}",
                          BUILD_HINT)  # fmt: skip
    path = Path(model).expanduser().resolve()
    if not path.is_file():
        raise EngineError(
            f"{path} is no GGUF model file", "write a tiny one with `kit engine tiny-gguf FILE`"
        )
    return server, path


class LlamacppLauncher(ProcessLauncher):
    """A local `llamacpp:MODEL.gguf` engine: one `llama-server --metrics` process."""

    url_pattern = _URL_RE

    def __init__(
        self,
        spec: LlamacppSpec,
        work_dir: Path,
        *,
        slots: int,
        ctx_per_slot: int,
        engine_args: Sequence[str] = (),
        log_path: Path | None = None,
        threads: int | None = None,
        grace_s: float = 10.0,
    ) -> None:
        server, model = check_llamacpp(spec.raw, spec.model_path)
        work_dir = Path(work_dir).resolve()
        work_dir.mkdir(parents=True, exist_ok=True)
        self.model_path = model
        args = server_args(
            model, slots=slots, ctx_per_slot=ctx_per_slot, engine_args=engine_args, threads=threads
        )
        super().__init__(
            spec,
            [str(server), *args],
            log_path if log_path is not None else work_dir / "llamacpp.log",
            grace_s=grace_s,
            cwd=work_dir,
        )

    def cpu_seconds(self) -> float | None:
        """CPU seconds (user + system) of the server and its threads; None once it is gone."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return None
        try:
            times = psutil.Process(proc.pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        return float(times.user + times.system)
