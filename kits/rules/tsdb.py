"""A recorded history served by a Prometheus of its own, for evaluating rules over it.

`serving_history(text, work_dir)` loads OpenMetrics text (timestamps on every sample) into a
fresh data directory with `promtool tsdb create-blocks-from openmetrics`, starts
`prometheus` on a free loopback port over it (no scrape targets) and yields its URL, then
stops it. Both tools come with Debian's `prometheus` package; a missing one, a file promtool
refuses or a server that does not get ready is one `KitError` line.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from stallkit.engine import free_port
from stallkit.kits.errors import KitError

_TOOLS_HINT = "install Prometheus's tools (Debian: apt-get install prometheus)"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise KitError(f"{name} is not on PATH", _TOOLS_HINT)
    return path


@contextlib.contextmanager
def serving_history(text: str, work_dir: Path, ready_s: float = 60.0) -> Iterator[str]:
    """Serve `text` (OpenMetrics) from a Prometheus of its own while the block runs."""
    promtool, prometheus = _tool("promtool"), _tool("prometheus")
    work_dir.mkdir(parents=True, exist_ok=True)
    source, data = work_dir / "history.om.txt", work_dir / "data"
    source.write_text(text, encoding="utf-8")
    made = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if made.returncode != 0:
        last = (made.stderr or made.stdout).strip().splitlines()[-1:] or ["no output"]
        raise KitError(f"promtool refused the history: {last[0]}", "is it OpenMetrics text?")
    (work_dir / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    port = free_port()
    argv = [prometheus, f"--config.file={work_dir / 'prometheus.yml'}"]
    argv += [f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}"]
    argv += ["--storage.tsdb.retention.time=100y"]  # a recording may be old: keep all of it
    with (work_dir / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(url, proc, ready_s)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], ready_s: float) -> None:
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return
        if proc.poll() is not None:
            raise KitError("prometheus exited at start", "see prometheus.log in the work directory")
        time.sleep(0.1)
    raise KitError(f"prometheus did not get ready in {ready_s:g} s", "see its prometheus.log")
