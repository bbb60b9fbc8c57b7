"""A lean httpx transport: one HTTP/1.1 connection per request, parsed by httptools (C).

The load generator's own requests besides the streams (model list, ``/tokenize`` before every
turn) are small and many. httpx's default transport spends most of their cost in httpcore's
pure-Python parser, its pool's scans over thousands of connections and anyio's cancel scopes.
This transport writes the request in one go on a plain asyncio connection, parses the reply in
an asyncio ``Protocol`` with httptools and hands httpx the body as it arrives. Foreign failures
are translated here, at the edge, into httpx's exceptions, so the code above keeps using
ordinary httpx (``client.get``, ``client.post``, ``client.stream``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator

import httptools
import httpx

from stallkit.contract.urls import url_problem
from stallkit.loadgen.http.wire import default_tls

__all__ = ["LeanTransport", "check_url"]


def check_url(url: httpx.URL) -> None:
    """Raise ``httpx.UnsupportedProtocol`` for a URL this transport cannot request."""
    problem = url_problem(str(url))
    if problem is not None:
        raise httpx.UnsupportedProtocol(problem)


class _Reply(asyncio.Protocol):
    """Parses one response; the head and each body piece wake whoever waits."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.headers: list[tuple[bytes, bytes]] = []
        self.status: int | None = None
        self.chunks: list[bytes] = []
        self.complete = False
        self.framed = False
        self.error: httpx.TransportError | None = None
        self.waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = httpx.RemoteProtocolError(f"malformed HTTP response: {exc}")
        self._wake()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.complete = True

    def eof_received(self) -> bool:
        self.connection_lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.complete or self.error is not None:
            return
        if self.status is not None and not self.framed:
            self.complete = True  # the body ran to the end of the connection
        else:
            why = f": {exc}" if exc is not None else ""
            what = "before the response" if self.status is None else "mid-body"
            self.error = httpx.RemoteProtocolError(f"the server closed the connection {what}{why}")
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def wait(self, timeout_s: float | None) -> None:
        """Sleep until something arrives; ``httpx.ReadTimeout`` after ``timeout_s``."""
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout_s):
                await self.waiter
        except TimeoutError:
            raise httpx.ReadTimeout("no data within the read timeout") from None
        finally:
            self.waiter = None


class _Body(httpx.AsyncByteStream):
    """The response body as it arrives; closing it closes the request's connection."""

    def __init__(
        self, transport: asyncio.Transport, reply: _Reply, timeout_s: float | None
    ) -> None:
        self._transport, self._reply, self._timeout_s = transport, reply, timeout_s

    async def __aiter__(self) -> AsyncIterator[bytes]:
        reply = self._reply
        while True:
            if reply.chunks:
                data = b"".join(reply.chunks)
                reply.chunks.clear()
                yield data
            elif reply.complete:
                return
            elif reply.error is not None:
                raise reply.error
            else:
                await reply.wait(self._timeout_s)

    async def aclose(self) -> None:
        self._transport.abort()


async def _connect(url: httpx.URL, timeout_s: float | None) -> tuple[asyncio.Transport, _Reply]:
    loop = asyncio.get_running_loop()
    tls = url.scheme == "https"
    port = url.port or (443 if tls else 80)
    try:
        async with asyncio.timeout(timeout_s):
            transport, reply = await loop.create_connection(
                _Reply,
                url.host,
                port,
                ssl=default_tls() if tls else None,
                server_hostname=url.host if tls else None,
            )
    except TimeoutError:
        raise httpx.ConnectTimeout(f"connect to {url.host}:{port} timed out") from None
    except (OSError, ssl.SSLError) as exc:
        raise httpx.ConnectError(str(exc)) from exc
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return transport, reply


class LeanTransport(httpx.AsyncBaseTransport):
    """An httpx transport that opens one connection per request, without a pool.

    A load test's requests are long streams or one-off calls, so a fresh connection each costs
    little, and it avoids a pool's per-request scans over thousands of connections.
    """

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        url = request.url
        check_url(url)
        timeouts = request.extensions.get("timeout", {})
        body = b"".join([part async for part in request.stream])
        head = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), url.raw_path)]
        # the body is sent whole, so it goes with its length, never chunked
        head += [
            b"%s: %s" % (name, value)
            for name, value in request.headers.raw
            if name.lower() not in (b"content-length", b"transfer-encoding")
        ]
        if body or request.method in ("POST", "PUT", "PATCH"):
            head.append(b"Content-Length: %d" % len(body))
        transport, reply = await _connect(url, timeouts.get("connect"))
        try:
            transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
            while reply.status is None:
                if reply.error is not None:
                    raise reply.error
                await reply.wait(timeouts.get("read"))
        except BaseException:
            transport.abort()
            raise
        return httpx.Response(
            status_code=reply.status,
            headers=reply.headers,
            stream=_Body(transport, reply, timeouts.get("read")),
            extensions={"http_version": b"HTTP/1.1"},
        )


async def exchange(
    url: httpx.URL, request: bytes, connect_timeout_s: float, read_timeout_s: float
) -> httpx.Response:
    """Send a complete request (head and body bytes) and read the whole response.

    Failures raise httpx's exceptions, as the transport does; the read timeout counts from
    the last byte received.
    """
    transport, reply = await _connect(url, connect_timeout_s)
    try:
        transport.write(request)
        body = _Body(transport, reply, read_timeout_s)
        content = b"".join([part async for part in body])
    finally:
        transport.abort()
    assert reply.status is not None
    return httpx.Response(reply.status, headers=reply.headers, content=content)
