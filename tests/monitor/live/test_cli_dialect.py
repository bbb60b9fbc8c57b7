"""`--dialect` through the CLI runner: an unknown dialect, or a page in no dialect, is one
line with a hint and exit 2 for `kit monitor`, `kit backtest` and `kit rules`; `kit sim
serve` refuses an unknown one the same way."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stallkit.kits.cli import app
from tests.machine import scaled
from tests.serving import threaded_server

pytestmark = pytest.mark.wallclock


@pytest.fixture
def page_url() -> Iterator[str]:
    """A server whose /metrics is a page in no dialect (a DCGM exporter's)."""
    with _page(b'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 3\n') as url:
        yield url


@contextlib.contextmanager
def _page(body: bytes) -> Iterator[str]:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    with threaded_server(ThreadingHTTPServer(("127.0.0.1", 0), Page)) as url:
        yield url


def _one_line_exit_2(args: list[str], *words: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    for word in words:
        assert word in lines[0], lines[0]


def test_monitor_refuses_an_unknown_dialect(page_url: str, tmp_path: Path) -> None:
    args = ["monitor", page_url, "--dialect", "ollama", "--out", str(tmp_path / "r")]
    _one_line_exit_2(args, "ollama", "sglang")
    assert not (tmp_path / "r").exists()


def test_monitor_refuses_a_page_in_no_dialect(page_url: str, tmp_path: Path) -> None:
    args = ["monitor", page_url, "--no-dashboard", "--out", str(tmp_path / "r")]
    _one_line_exit_2(args, "no engine metrics", "--dialect")


def test_monitor_refuses_a_named_dialect_the_page_does_not_speak(tmp_path: Path) -> None:
    vllm = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
    with _page(vllm) as url:
        args = ["monitor", url, "--dialect", "sglang", "--no-dashboard", "--out", str(tmp_path)]
        _one_line_exit_2(args, "speaks vLLM's metrics", "--dialect vllm")
    # no engine: said before the kinds an SGLang page cannot show
    args = ["monitor", url, "--dialect", "sglang", "--no-dashboard", "--out", str(tmp_path)]
    _one_line_exit_2(args, "cannot read engine metrics")


def test_backtest_refuses_an_unknown_dialect_and_a_history_in_none(tmp_path: Path) -> None:
    history = tmp_path / "h.om"
    history.write_text('# TYPE foo gauge\nfoo{instance="a"} 1 0\n# EOF\n')
    out = str(tmp_path / "r")
    _one_line_exit_2(["backtest", "--from-file", str(history), "--dialect", "x", "--out", out], "x")
    _one_line_exit_2(["backtest", "--from-file", str(history), "--out", out], "dialect")


def test_backtest_reads_a_tgi_history(tmp_path: Path) -> None:
    # forward passes stop after 10 scrapes, with requests queued and batched: frozen (in
    # OpenMetrics a counter without `_total`, as TGI writes them, is of unknown type)
    values = {
        "tgi_queue_size": lambda k: 4,
        "tgi_batch_current_size": lambda k: 8,
        'tgi_batch_inference_success{method="decode",': lambda k: 4 * min(k, 10),
    }
    lines = []
    for name, value in values.items():
        family = name.split("{")[0]
        lines.append(f"# TYPE {family} {'unknown' if 'success' in name else 'gauge'}")
        labels = (name if "{" in name else name + "{") + 'instance="t:1"}'
        lines += [f"{labels} {value(k)} {15 * k}" for k in range(40)]
    history = tmp_path / "h.om"
    history.write_text("\n".join(lines) + "\n# EOF\n")
    result = CliRunner().invoke(
        app, ["backtest", "--from-file", str(history), "--no-gpu", "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 0, result.output
    assert "t:1: 1 stall(s)" in result.output


def test_rules_refuses_an_unknown_dialect() -> None:
    _one_line_exit_2(["rules", "--dialect", "vllm,ollama"], "unknown metric dialect 'ollama'")
    _one_line_exit_2(["rules", "--dialect", ","], "--dialect names none")
    _one_line_exit_2(["rules", "--dialect", "all,tgi"], "give it alone")


def test_sim_serve_refuses_an_unknown_dialect() -> None:
    _one_line_exit_2(["sim", "serve", "--dialect", "ollama"], "--dialect")


@pytest.fixture
def frozen_sglang_sim() -> Iterator[str]:
    """`kit sim serve --dialect sglang` in its own process, two requests running, frozen from
    engine second 200 (10 wall s at 20x). The fixture yields once the engine reports them
    running: a freeze that came before they arrived left an idle engine, and no stall, on a
    loaded machine."""
    import subprocess
    import sys
    import threading

    import httpx

    argv = [sys.executable, "-m", "stallkit", "sim", "serve", "--dialect", "sglang"]
    argv += ["--time-scale", "20", "--freeze-at", "200", "--port", "0", "--log-level", "warning"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, line
        url = line.rsplit(" ", 1)[1].strip()
        body = {
            "model": "stallkit-sim",
            "prompt": "go " * 100,
            "max_tokens": 50_000,
            "stream": True,
        }

        def request() -> None:
            with (
                contextlib.suppress(httpx.HTTPError),
                httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r,
            ):
                for _ in r.iter_lines():
                    pass

        for _ in range(2):
            threading.Thread(target=request, daemon=True).start()
        deadline = time.monotonic() + scaled(30)  # two requests reach a live engine's queue
        while "sglang:num_running_reqs" not in _running(url):
            assert time.monotonic() < deadline, "the two requests never ran"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def _running(url: str) -> str:
    """The lines of the engine's metrics page that report running requests above zero."""
    import httpx

    page = httpx.get(f"{url}/metrics", timeout=10).text
    return "\n".join(
        line
        for line in page.splitlines()
        if line.startswith("sglang:num_running_reqs") and float(line.rsplit(" ", 1)[1]) > 0
    )


def test_kit_monitor_names_a_frozen_sglang_engine_and_the_kinds_it_cannot_show(
    frozen_sglang_sim: str, tmp_path: Path
) -> None:
    import subprocess
    import sys

    argv = [sys.executable, "-m", "stallkit", "monitor", frozen_sglang_sim, "--interval", "0.1"]
    # the freeze comes at most 10 s after the fixture yields; the watch outlasts it by 20 s
    argv += ["--stall-after", "1", "--stop-after", "0", "--duration", f"{scaled(30):.0f}"]
    argv += ["--no-dashboard", "--exit-on-stall", "--out", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=scaled(90))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "stall: frozen" in done.stdout
    said = " ".join(done.stderr.split())  # wrapped between words to the terminal's width
    assert "metrics: SGLang (sglang); not available: blocked" in said
