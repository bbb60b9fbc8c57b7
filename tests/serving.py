"""In-process servers and load the test packages share: an ASGI app served on 127.0.0.1
port 0, a threaded `http.server` likewise, and streaming chat completions held open against
an engine while a test watches it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import httpx
import uvicorn

#: output tokens of a request still in flight at any strike these tests set: two such
#: requests take about 1090 engine s to decode on the simulator's default cost model (50_000
#: take about 360), past the latest strike, 120 wall s at a time scale of 10 or 30 at 20
#: (stretched by at most tests.machine.MAX_FACTOR); with a prompt of a few hundred tokens
#: it stays under the simulator's longest request (131072)
OUTLASTING_TOKENS = 130_000


@contextlib.asynccontextmanager
async def asgi_server(app: Any) -> AsyncIterator[str]:
    """A real HTTP server on 127.0.0.1 port 0 running the ASGI `app`; yields its URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None,
                                           lifespan="off"))  # fmt: skip
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        await task


@contextlib.contextmanager
def threaded_server(server: ThreadingHTTPServer) -> Iterator[str]:
    """Serve `server` (bound to 127.0.0.1 port 0) on a thread; yields its URL, closes it after."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def stream_chat(
    client: httpx.AsyncClient,
    url: str,
    max_tokens: int,
    *,
    model: str = "stallkit-sim",
    ignore_eos: bool = False,
) -> int:
    """One streaming chat completion; returns the number of content deltas seen."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "tell me about stalls " * 40}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    if ignore_eos:
        body["ignore_eos"] = True
    deltas = 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                deltas += bool(json.loads(line[6:])["choices"])
    return deltas


@contextlib.asynccontextmanager
async def chat_load(
    url: str,
    n: int,
    max_tokens: int,
    *,
    model: str = "stallkit-sim",
    ignore_eos: bool = False,
    timeout_s: float = 30.0,
) -> AsyncIterator[list[asyncio.Task[int]]]:
    """`n` concurrent streaming chats (`stream_chat`), cancelled when the block ends."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s)) as client:
        tasks = [
            asyncio.create_task(
                stream_chat(client, url, max_tokens, model=model, ignore_eos=ignore_eos)
            )
            for _ in range(n)
        ]
        try:
            yield tasks
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
