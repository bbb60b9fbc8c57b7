"""The fast wire for streamed replies: one HTTP/1.1 request per connection, parsed in C.

A token stream arrives as one small socket read per token, so the cost per read decides how
many streams one process can feed. Here the whole response is handled inside an asyncio
``Protocol``: ``data_received`` stamps the arrival time, feeds httptools' C parser, and hands
the body straight to the SSE decoder, which records the chunk. No coroutine wakes per chunk;
the request's coroutine sleeps until the stream ends, fails or times out. The read timeout is
one timer that is re-armed lazily: when it fires it checks the time of the last byte, so a
chunk costs no timer work.

Every failure is recorded on the result, named by what happened: no connection, the connection
closed before a response, a non-200 status, a 200 that is not an SSE stream, the connection
closed mid-stream, or no byte within the read timeout.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Mapping

import httptools

from stallkit.loadgen.http.sse import ERROR_EXCERPT_CHARS, SseDecoder, StreamResult


class Target:
    """Where a stream goes: host, port, path and the request head sent before the body."""

    __slots__ = ("head", "host", "port", "tls")

    def __init__(
        self, scheme: str, host: str, port: int, path: str, headers: Mapping[str, str]
    ) -> None:
        self.host, self.port, self.tls = host, port, scheme == "https"
        default = 443 if self.tls else 80
        authority = host if port == default else f"{host}:{port}"
        if ":" in host:  # an IPv6 literal
            authority = f"[{host}]" if port == default else f"[{host}]:{port}"
        lines = [
            f"POST {path} HTTP/1.1",
            f"Host: {authority}",
            "Content-Type: application/json",
            "Accept: text/event-stream",
            *(f"{k}: {v}" for k, v in headers.items()),
        ]
        self.head = "\r\n".join(lines).encode("latin-1")


class _Reply(asyncio.Protocol):
    """Parses one response as it arrives and records it; ``finished`` resolves at the end."""

    def __init__(self, result: StreamResult, finished: asyncio.Future[None]) -> None:
        self.result, self.finished = result, finished
        self.decoder = SseDecoder(result)
        self.parser = httptools.HttpResponseParser(self)
        self.timer: asyncio.TimerHandle | None = None
        self.last_byte = self.now = 0.0
        self.sse = True
        # a body with a length or chunked framing: EOF before its end is a loss
        self.framed = False
        self.excerpt: bytes | None = None  # collecting the body of a failed response
        self.complete = False
        self._header = b""
        self._body: list[bytes] = []  # SSE body pieces of the current read, decoded together

    def data_received(self, data: bytes) -> None:
        if self.finished.done():
            return
        self.last_byte = stamp = time.perf_counter()
        self.now = stamp - self.result.started
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.result.status is None:
                self.result.fail("connect_error", f"no valid HTTP response: {exc}")
            else:
                self._decode()
                self.result.fail("stream_error", f"malformed HTTP response: {exc}")
            self._finish()
        else:
            self._decode()
            if self.complete:
                self._end_of_body()

    def _decode(self) -> None:
        """Decode this read's body pieces at once: one split for every event they hold."""
        body = self._body
        if body and not self.finished.done():
            piece = body[0] if len(body) == 1 else b"".join(body)
            body.clear()
            if self.decoder.feed(piece, self.now):
                self._finish()

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower in (b"content-length", b"transfer-encoding"):
            self.framed = True
        elif lower == b"content-type":
            self._header = value.lower()

    def on_headers_complete(self) -> None:
        status = self.result.status = self.parser.get_status_code()
        if status != 200 or (self._header and not self._header.startswith(b"text/event-stream")):
            self.excerpt = b""
            self.sse = False

    def on_body(self, body: bytes) -> None:
        if self.sse:
            self._body.append(body)
        elif self.excerpt is not None:
            self.excerpt += body
            if len(self.excerpt) >= ERROR_EXCERPT_CHARS:
                self.complete = True

    def on_message_complete(self) -> None:
        self.complete = True

    def _end_of_body(self) -> None:
        if self.finished.done():
            return
        result = self.result
        if self.sse:
            self.decoder.end(self.now)
        else:
            excerpt = (self.excerpt or b"")[:ERROR_EXCERPT_CHARS].decode("utf-8", "replace")
            if result.status != 200:
                result.fail("http_error", f"HTTP {result.status}: {excerpt.strip()}")
            else:
                kind = self._header.decode("latin-1")
                result.fail("stream_error", f"not an SSE stream: a {kind} body: {excerpt.strip()}")
        self._finish()

    def eof_received(self) -> bool:
        self.connection_lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.finished.done():
            return
        result = self.result
        why = f": {exc}" if exc is not None else ""
        if result.status is None:
            result.fail("connect_error", f"no response: the connection closed{why}")
        elif not self.framed:  # the body ran to the end of the connection
            self._end_of_body()
        else:
            tokens = result.streamed_tokens
            result.fail("stream_error", f"connection closed mid-stream after {tokens} tokens{why}")
        self._finish()

    def _finish(self) -> None:
        if not self.finished.done():
            self.finished.set_result(None)


@functools.cache
def default_tls() -> ssl.SSLContext:
    """One verifying TLS context for every https stream (building one loads the CA store)."""
    return ssl.create_default_context()


def _watch(reply: _Reply, timeout_s: float, loop: asyncio.AbstractEventLoop) -> None:
    """The read timeout: fires once per timeout and re-arms from the last byte's time."""
    if reply.finished.done():
        return
    quiet = time.perf_counter() - reply.last_byte
    if quiet >= timeout_s:
        tokens = reply.result.streamed_tokens
        reply.result.fail("timeout", f"no byte within the read timeout (after {tokens} tokens)")
        reply._finish()
    else:
        reply.timer = loop.call_later(timeout_s - quiet, _watch, reply, timeout_s, loop)


async def stream_post(
    target: Target,
    body: bytes,
    result: StreamResult,
    read_timeout_s: float,
    connect_timeout_s: float,
    tls: ssl.SSLContext | None = None,
) -> None:
    """Send one POST and record its streamed reply into ``result`` (which never raises).

    Cancelling the caller closes the connection at once; ``result`` keeps what was measured.
    """
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    reply = _Reply(result, finished)
    try:
        async with asyncio.timeout(connect_timeout_s):
            transport, _ = await loop.create_connection(
                lambda: reply,
                target.host,
                target.port,
                ssl=(tls or default_tls()) if target.tls else None,
                server_hostname=target.host if target.tls else None,
            )
    except TimeoutError:
        result.fail("connect_error", f"connect timeout after {connect_timeout_s} s")
        return
    except (OSError, ssl.SSLError) as exc:
        result.fail("connect_error", f"no response: cannot connect: {exc}")
        return
    try:
        reply.last_byte = time.perf_counter()
        transport.write(b"%s\r\nContent-Length: %d\r\n\r\n" % (target.head, len(body)))
        transport.write(body)
        reply.timer = loop.call_later(read_timeout_s, _watch, reply, read_timeout_s, loop)
        await finished
    finally:
        if reply.timer is not None:
            reply.timer.cancel()
        transport.abort()
