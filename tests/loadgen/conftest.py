"""A deliberately hostile OpenAI-style server on a real loopback socket, for the client tests.

It speaks raw HTTP/1.1 over ``asyncio.start_server`` so each misbehaviour is exact: streams that
stall, a request never answered by a single byte, error objects inside a 200 stream, malformed
SSE, no ``[DONE]``, a 500, a connection dropped before or during the response, a trickle of slow
tokens. A request picks a behaviour by a path prefix (``/stall/v1/chat/completions``); without
one the server takes the next behaviour of its script, cycling. It also serves ``/v1/models``
and a word-counting ``/tokenize`` with the simulator's chat template, and reports usage with
that same count, so a run against it can check prompt sizing too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

BEHAVIOURS = (
    "ok",
    "multi",
    "stall",
    "silent",
    "error",
    "malformed",
    "garbage",
    "nodone",
    "500",
    "drop",
    "dropmid",
    "trickle",
    "json",
    "unframed",
)


def sim_count(messages: Sequence[dict[str, str]]) -> int:
    """Token count of a chat prompt under the simulator's template (a token is a word)."""
    return sum(1 + len(m["content"].split()) for m in messages) + 1


@dataclass
class HostileServer:
    script: Sequence[str] = ("ok",)
    max_model_len: int | None = 131072
    models: Sequence[str] = ("hostile",)
    tokenize: bool = True
    models_body: bytes | None = None
    tokens_per_reply: int = 5
    stall_tokens: int = 3
    gap_s: float = 0.2
    trickle_gap_s: float = 0.3
    trickle_tokens: int = 6
    hold_s: float = 30.0
    url: str = ""
    handlers: set[asyncio.Task[Any]] = field(default_factory=set)
    requests: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)
    _next: Iterator[str] = field(init=False)

    def __post_init__(self) -> None:
        self._next = itertools.cycle(self.script)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self.handlers.discard(task)

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ln)}
        size = int(headers.get("content-length", "0"))
        body = json.loads(await reader.readexactly(size)) if size else {}
        behaviour, route = _split(path)
        self.requests.append(f"{method} {path}")
        self.auth.append(headers.get("authorization"))
        if route == "/v1/models":
            return await self._models(writer)
        if route == "/tokenize":
            if not self.tokenize:
                return await _send(writer, 404, b'{"detail":"Not Found"}')
            payload = {"count": sim_count(body["messages"]), "max_model_len": self.max_model_len}
            return await _send(writer, 200, json.dumps(payload).encode())
        if route != "/v1/chat/completions":
            return await _send(writer, 404, b'{"detail":"Not Found"}')
        self.bodies.append(body)
        await self._chat(behaviour or next(self._next), body, reader, writer)
        return False

    async def _models(self, writer: asyncio.StreamWriter) -> bool:
        if self.models_body is not None:
            return await _send(writer, 200, self.models_body, "text/html")
        data = [
            {"id": m, "object": "model", "max_model_len": self.max_model_len} for m in self.models
        ]
        return await _send(writer, 200, json.dumps({"object": "list", "data": data}).encode())

    async def _chat(
        self,
        behaviour: str,
        body: dict[str, Any],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        prompt = sim_count(body["messages"])
        if behaviour == "500":
            await _send(writer, 500, b'{"error":{"message":"internal boom","code":500}}')
            return
        if behaviour == "silent":  # not a byte, not even a status line, until the client gives up
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.read(), self.hold_s)
            return
        if behaviour == "drop":
            writer.transport.abort()
            return
        if behaviour == "json":  # a whole chat completion although a stream was asked for
            reply = {"object": "chat.completion", "choices": [{"message": {"content": "hi"}}]}
            await _send(writer, 200, json.dumps(reply).encode())
            return
        if behaviour == "unframed":  # an SSE body delimited by closing the connection
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
            for _ in range(3):
                chunk = {"choices": [{"index": 0, "delta": {"content": " tok"}}]}
                writer.write(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")
            writer.write(b"data: [DONE]\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        sse = _Sse(writer)
        if behaviour == "multi":  # several words per chunk: 3 + 2 + 4 tokens
            for n in (3, 2, 4):
                await sse.token(n)
            await sse.usage(prompt, 9)
            await sse.done()
        elif behaviour in ("stall", "dropmid"):
            for _ in range(self.stall_tokens if behaviour == "stall" else 2):
                await sse.token(1)
                await asyncio.sleep(self.gap_s)
            if behaviour == "dropmid":
                writer.transport.abort()
                return
            with contextlib.suppress(TimeoutError):  # hold until the client gives up
                await asyncio.wait_for(reader.read(), self.hold_s)
        elif behaviour == "error":
            await sse.token(1)
            await sse.raw(b'data: {"error": {"message": "engine exploded", "code": 500}}\n\n')
            await sse.done()
        elif behaviour == "malformed":
            await sse.token(1)
            await sse.raw(b"data: {not json at all\n\n")
            await sse.done()
        elif behaviour == "garbage":
            await sse.token(1)
            await sse.raw(b"this line is not server-sent events\n\n")
            await sse.done()
        elif behaviour == "nodone":
            await sse.token(2)
            await sse.usage(prompt, 2)
            await sse.end()
        elif behaviour == "trickle":
            for _ in range(self.trickle_tokens):
                await sse.token(1)
                await asyncio.sleep(self.trickle_gap_s)
            await sse.usage(prompt, self.trickle_tokens)
            await sse.done()
        else:
            n = min(body.get("max_tokens", self.tokens_per_reply), self.tokens_per_reply)
            for _ in range(n):
                await sse.token(1)
            await sse.usage(prompt, n)
            await sse.done()


def _split(path: str) -> tuple[str | None, str]:
    first, _, rest = path.lstrip("/").partition("/")
    if first in BEHAVIOURS:
        return first, "/" + rest
    return None, path


async def _send(
    writer: asyncio.StreamWriter, status: int, body: bytes, kind: str = "application/json"
) -> bool:
    reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}[status]
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {kind}\r\n"
        f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    return True


class _Sse:
    """Writes SSE events as HTTP chunks."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def raw(self, data: bytes) -> None:
        self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await self.writer.drain()

    async def token(self, words: int) -> None:
        text = "".join(" tok" for _ in range(words))
        chunk = {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": text}}],
        }
        await self.raw(b"data: " + json.dumps(chunk).encode() + b"\n\n")

    async def usage(self, prompt: int, completion: int) -> None:
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        await self.raw(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")

    async def done(self) -> None:
        await self.raw(b"data: [DONE]\n\n")
        await self.end()

    async def end(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()


@contextlib.asynccontextmanager
async def _serve(server: HostileServer) -> AsyncIterator[HostileServer]:
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    try:
        yield server
    finally:
        srv.close()
        for task in list(server.handlers):
            task.cancel()
        await asyncio.gather(*server.handlers, return_exceptions=True)
        await srv.wait_closed()


@pytest.fixture
def hostile() -> Callable[..., contextlib.AbstractAsyncContextManager[HostileServer]]:
    """Factory: ``async with hostile(script=[...], **options) as server`` (``server.url``)."""

    def start(**options: Any) -> contextlib.AbstractAsyncContextManager[HostileServer]:
        return _serve(HostileServer(**options))

    return start


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL on which nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def hostile_in_thread() -> Iterator[
    Callable[..., contextlib.AbstractContextManager[HostileServer]]
]:
    """Like ``hostile`` but served from a background thread's loop, for synchronous tests."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    @contextlib.contextmanager
    def start(**options: Any) -> Iterator[HostileServer]:
        manager = _serve(HostileServer(**options))
        server = asyncio.run_coroutine_threadsafe(manager.__aenter__(), loop).result(10)
        try:
            yield server
        finally:
            asyncio.run_coroutine_threadsafe(manager.__aexit__(None, None, None), loop).result(10)

    yield start
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()
