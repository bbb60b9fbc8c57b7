"""Client overhead: CPU per streamed token and the concurrent streams one process keeps up with.

A minimal SSE source runs in a child process (its CPU is not counted): a raw asyncio socket
server that paces every open stream from one ticker, writing pre-encoded chat chunks (one token
each, like vLLM's default) at ``--rate`` tokens per second per stream. The parent drives N
concurrent requests through the real load-generator client (``loadgen.client.stream_chat``),
their starts spread over ``--ramp-s``, and measures its own CPU time (user + system). A level
is sustained when every stream completes and the 95th percentile stream's first-to-last-token
time is at most 20 % above the source's pace. Levels double from ``--start`` until one falls
behind, ``--max-streams`` is reached or ``--budget-s`` has passed (under two minutes).

    python benchmarks/client_overhead.py [--rate 20] [--tokens 100] [--max-streams 8000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time

import psutil

CHUNK = (
    b"data: "
    + json.dumps(
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": " w"}}]}
    ).encode()
    + b"\n\n"
)
HEADERS = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def raise_fd_limit() -> int:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


async def serve(rate: float, tokens: int) -> None:
    """The SSE source: every stream gets one chunk per tick until it has sent ``tokens``."""
    streams: dict[asyncio.StreamWriter, int] = {}
    token_chunk = _chunked(CHUNK)
    usage = {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": tokens + 10}
    tail = _chunked(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
    tail += _chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(HEADERS)
                streams[writer] = 0
        except (asyncio.IncompleteReadError, ConnectionError, IndexError):
            streams.pop(writer, None)
            writer.close()

    async def ticker() -> None:
        period = 1.0 / rate
        next_tick = time.perf_counter()
        while True:
            next_tick += period
            for writer, sent in list(streams.items()):
                if sent < tokens:
                    writer.write(token_chunk)
                    streams[writer] = sent + 1
                else:
                    writer.write(tail)
                    del streams[writer]
            await asyncio.sleep(max(0.0, next_tick - time.perf_counter()))

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=8192)
    print(server.sockets[0].getsockname()[1], flush=True)
    tick = asyncio.create_task(ticker())
    try:
        await asyncio.Event().wait()
    finally:
        tick.cancel()


async def level(
    url: str, streams: int, tokens: int, rate: float, ramp_s: float
) -> dict[str, float]:
    """Run ``streams`` concurrent streams; return CPU, throughput and lateness figures.

    Starts are spread over ``ramp_s`` (agents start staggered too), so a burst of thousands of
    simultaneous connects does not overflow the listen queue.
    """
    from loadgen.client import StreamResult, make_client, stream_chat

    body = {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with make_client(read_timeout_s=60, connect_timeout_s=60) as client:
        cpu0, wall0 = time.process_time(), time.perf_counter()

        async def one(i: int) -> StreamResult:
            await asyncio.sleep(ramp_s * i / streams)
            return await stream_chat(client, url, body, StreamResult())

        results = await asyncio.gather(*(one(i) for i in range(streams)))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    ok = [r for r in results if r.outcome == "ok"]
    received = sum(n for r in results for _, n in r.chunks)
    # Pace: first to last token against the source's pace, so connection set-up is excluded.
    pace = sorted((r.chunks[-1][0] - r.chunks[0][0]) / ((tokens - 1) / rate) for r in ok)
    ttfts = sorted(r.ttft_s or 0.0 for r in ok)
    return {
        "streams": streams,
        "ok": len(ok),
        "tokens": received,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_s_per_mtok": cpu / received * 1e6 if received else float("inf"),
        "cpu_util": cpu / wall,
        "p95_lateness": _p95(pace),
        "p95_ttft_s": _p95(ttfts),
    }


def _p95(values: list[float]) -> float:
    return values[min(len(values) - 1, int(0.95 * len(values)))] if values else float("inf")


async def bench(args: argparse.Namespace) -> None:
    limit = raise_fd_limit()
    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            "--rate",
            str(args.rate),
            "--tokens",
            str(args.tokens),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1/chat/completions"
        print(f"fd limit {limit}; {args.tokens} tokens per stream at {args.rate} tok/s per stream")
        print(
            f"{'streams':>8} {'ok':>6} {'tok/s':>9} {'cpu s/Mtok':>11} {'cpu %':>6} "
            f"{'p95 pace':>9} {'p95 ttft':>9} {'source cpu %':>13}"
        )
        source = psutil.Process(server.pid)
        best, n, deadline = 0, args.start, time.perf_counter() + args.budget_s
        while n <= min(args.max_streams, limit // 2 - 100) and time.perf_counter() < deadline:
            before = sum(source.cpu_times()[:2])
            r = await level(url, n, args.tokens, args.rate, args.ramp_s)
            source_util = (sum(source.cpu_times()[:2]) - before) / r["wall_s"]
            kept_up = r["ok"] == n and r["p95_lateness"] <= 1.2
            print(
                f"{n:>8} {r['ok']:>6.0f} {r['tokens'] / r['wall_s']:>9.0f} "
                f"{r['cpu_s_per_mtok']:>11.1f} {100 * r['cpu_util']:>6.0f} "
                f"{r['p95_lateness']:>9.2f} {r['p95_ttft_s']:>9.2f} {100 * source_util:>13.0f} "
                f"{'kept up' if kept_up else 'FELL BEHIND'}",
                flush=True,
            )
            if not kept_up:
                break
            best, n = n, n * 2
        print(f"largest sustained concurrency: {best} streams at {args.rate} tok/s each")
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=20.0, help="tokens/s per stream")
    parser.add_argument("--tokens", type=int, default=100, help="tokens per stream")
    parser.add_argument("--start", type=int, default=250, help="first concurrency level")
    parser.add_argument("--max-streams", type=int, default=8000, help="last level tried")
    parser.add_argument("--ramp-s", type=float, default=2.0, help="spread stream starts")
    parser.add_argument("--budget-s", type=float, default=90.0, help="stop starting levels after")
    args = parser.parse_args()
    if args.serve:
        raise_fd_limit()
        asyncio.run(serve(args.rate, args.tokens))
    else:
        asyncio.run(bench(args))


if __name__ == "__main__":
    main()
