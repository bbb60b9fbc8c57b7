"""The httpx face of the one HTTP/1.1 stack: a lean transport, one connection per request.

The load generator's own requests besides the streams (model list, ``/tokenize`` before every
turn) are small and many. httpx's default transport spends most of their cost in httpcore's
pure-Python parser, its pool's scans over thousands of connections and anyio's cancel scopes.
This transport sends the request on the stack of :mod:`stallkit.loadgen.http.wire` (httptools'
C parser on a plain asyncio connection) and hands httpx the body as it arrives. The stack's
faults are translated here, once, into httpx's exceptions, so the code above keeps using
ordinary httpx (``client.get``, ``client.post``, ``client.stream``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from stallkit.contract.urls import url_problem
from stallkit.loadgen.http.wire import Exchange, Fault, Target

__all__ = ["LeanTransport", "check_url", "exchange"]

_NO_LENGTH = (b"content-length", b"transfer-encoding")


def check_url(url: httpx.URL) -> None:
    """Raise ``httpx.UnsupportedProtocol`` for a URL this transport cannot request."""
    problem = url_problem(str(url))
    if problem is not None:
        raise httpx.UnsupportedProtocol(problem)


class _Reply(Exchange):
    """A response for httpx: the head and each read's body wake whoever waits."""

    def __init__(self, read_timeout_s: float | None) -> None:
        super().__init__(read_timeout_s)
        self.complete = False
        self.error: httpx.TransportError | None = None

    def head(self) -> None:
        self.wake()

    def received(self) -> None:
        self.wake()  # the body waits in ``pieces`` for the reader

    def ended(self) -> None:
        self.complete = True

    def failed(self, fault: Fault, detail: str) -> None:
        self.error = _httpx_error(fault, detail, self)

    async def response_head(self) -> None:
        """Sleep until the status and headers are in; the fault's httpx exception if none come."""
        while self.status is None:
            if self.error is not None:
                raise self.error
            await self.wait()


def _httpx_error(fault: Fault, detail: str, reply: _Reply) -> httpx.TransportError:
    if fault == "connect_timeout":
        assert reply.target is not None
        where = f"{reply.target.host}:{reply.target.port}"
        return httpx.ConnectTimeout(f"connect to {where} timed out")
    if fault == "connect":
        return httpx.ConnectError(detail)
    if fault == "timeout":
        return httpx.ReadTimeout("no data within the read timeout")
    if fault == "invalid":
        return httpx.RemoteProtocolError(f"malformed HTTP response: {detail}")
    if fault == "recording":
        return httpx.ReadError(f"could not take the response: {detail}")
    what = "before the response" if reply.status is None else "mid-body"
    return httpx.RemoteProtocolError(f"the server closed the connection {what}{detail}")


class _Body(httpx.AsyncByteStream):
    """The response body as it arrives; closing it closes the request's connection."""

    def __init__(self, reply: _Reply) -> None:
        self._reply = reply

    async def __aiter__(self) -> AsyncIterator[bytes]:
        reply = self._reply
        while True:
            if reply.pieces:
                data = b"".join(reply.pieces)
                reply.pieces.clear()
                yield data
            elif reply.complete:
                return
            elif reply.error is not None:
                raise reply.error
            else:
                await reply.wait()

    async def aclose(self) -> None:
        self._reply.close()


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
        # the body is sent whole, so it goes with its length, never chunked
        headers = [(k, v) for k, v in request.headers.raw if k.lower() not in _NO_LENGTH]
        target = Target(url, request.method, headers)
        sized = body or request.method in ("POST", "PUT", "PATCH")
        reply = _Reply(timeouts.get("read"))
        try:
            await reply.open(target, body if sized else None, timeouts.get("connect"))
            await reply.response_head()
        except BaseException:
            reply.close()
            raise
        assert reply.status is not None
        return httpx.Response(
            status_code=reply.status,
            headers=reply.headers,
            stream=_Body(reply),
            extensions={"http_version": b"HTTP/1.1"},
        )


async def exchange(
    target: Target, body: bytes, connect_timeout_s: float, read_timeout_s: float
) -> httpx.Response:
    """POST ``body`` to ``target`` and read the whole response (httpx's exceptions on a fault)."""
    reply = _Reply(read_timeout_s)
    await reply.run(target, body, connect_timeout_s)
    if reply.error is not None:
        raise reply.error
    assert reply.status is not None
    return httpx.Response(reply.status, headers=reply.headers, content=b"".join(reply.pieces))
