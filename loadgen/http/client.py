"""The streaming client: one chat completion over SSE, measured chunk by chunk, never raising.

Each call streams one request on its own connection of the one HTTP/1.1 stack
(:mod:`stallkit.loadgen.http.wire`) and fills a :class:`StreamResult` as bytes arrive, so a
caller that is cancelled mid-stream still holds everything measured so far. Each read's body
goes straight to the SSE decoder (:mod:`stallkit.loadgen.http.sse`) from the connection's
protocol; the request's coroutine sleeps until the stream ends, fails or times out.

Failures are translated here, once, into exactly one outcome: ``ok``, ``timeout`` (no byte for
the client's read timeout, counted from the last byte received), ``http_error``,
``stream_error`` (an error object in a 200 stream, malformed SSE or HTTP, a 200 that is not an
SSE stream, no ``[DONE]``, or the connection closed mid-stream) or ``connect_error`` (a bad
URL, no connection, or no response at all). The error message names which.

A client from :func:`make_client` is also an ordinary ``httpx.AsyncClient`` (the preflight and
the token counter use it as such) on the same stack, through
:class:`~stallkit.loadgen.http.transport.LeanTransport`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import httpx
import orjson

from stallkit.contract.urls import url_problem
from stallkit.loadgen.http.sse import ERROR_EXCERPT_CHARS, SseDecoder, StreamResult, rescale
from stallkit.loadgen.http.transport import LeanTransport, exchange
from stallkit.loadgen.http.wire import Exchange, Fault, Target

__all__ = ["ERROR_EXCERPT_CHARS", "StreamResult", "StreamingClient", "make_client", "stream_chat"]

_SSE = b"text/event-stream"
_JSON = b"application/json"


class StreamingClient(httpx.AsyncClient):
    """An httpx client on the lean transport that also streams chat completions (stream_chat)."""

    def __init__(
        self, read_timeout_s: float, connect_timeout_s: float, headers: Mapping[str, str]
    ) -> None:
        timeout = httpx.Timeout(
            connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=None
        )
        super().__init__(
            timeout=timeout, transport=LeanTransport(), headers=dict(headers), trust_env=False
        )
        self.read_timeout_s, self.connect_timeout_s = read_timeout_s, connect_timeout_s
        self._stream_headers = [
            (k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
        ]
        self._targets: dict[tuple[str, bytes], Target | str] = {}

    async def post(
        self, url: httpx.URL | str, *, json: Any = None, **options: Any
    ) -> httpx.Response:
        """``httpx.AsyncClient.post``; a plain JSON post (``/tokenize`` before every turn) goes
        straight to the stack, skipping the client's request and response machinery."""
        target = self.target(str(url), _JSON)
        if options or json is None or isinstance(target, str):
            return await super().post(url, json=json, **options)  # httpx says what is wrong
        response = await exchange(
            target, orjson.dumps(json), self.connect_timeout_s, self.read_timeout_s
        )
        response.request = httpx.Request("POST", url)
        return response

    def target(self, url: str, accept: bytes = _SSE) -> Target | str:
        """A POST to ``url`` accepting ``accept``, or why it cannot be sent (cached per URL)."""
        found = self._targets.get((url, accept))
        if found is None:
            found = self._targets[(url, accept)] = self._new_target(url, accept)
        return found

    def _new_target(self, url: str, accept: bytes) -> Target | str:
        problem = url_problem(url)  # the contract's rule, in the words kit load and url: use
        if problem is not None:
            return f"bad URL {url!r}: {problem}"
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            return f"bad URL {url!r}: {exc}"
        fixed = [(b"Host", parsed.netloc), (b"Content-Type", _JSON), (b"Accept", accept)]
        return Target(parsed, "POST", fixed + self._stream_headers)


def make_client(
    read_timeout_s: float, connect_timeout_s: float, headers: Mapping[str, str] | None = None
) -> StreamingClient:
    """An async client with no connection cap: one connection per in-flight request.

    Environment proxies are ignored: a load test talks to the engine directly.
    """
    return StreamingClient(read_timeout_s, connect_timeout_s, headers or {})


async def stream_chat(
    client: StreamingClient, url: str, body: Mapping[str, Any], result: StreamResult
) -> StreamResult:
    """POST a streaming request and fill ``result``; per-request failures become its outcome."""
    start = result.started = time.perf_counter()
    try:
        target = client.target(url)
        if isinstance(target, str):
            result.fail("connect_error", target)
        else:
            reply = _Reply(result, client.read_timeout_s)
            await reply.run(target, orjson.dumps(body), client.connect_timeout_s)
    finally:
        result.elapsed_s = time.perf_counter() - start
    if result.outcome is None:
        result.outcome = "ok"
        rescale(result)
    return result


class _Reply(Exchange):
    """A streamed reply, recorded into its result as it arrives; a failure is its outcome."""

    def __init__(self, result: StreamResult, read_timeout_s: float) -> None:
        super().__init__(read_timeout_s)
        self.result = result
        self.decoder = SseDecoder(result)
        self.kind = b""  # the content type
        self.excerpt: bytes | None = None  # collecting the body of a failed response

    def head(self) -> None:
        status = self.result.status = self.status
        for name, value in self.headers:
            if name.lower() == b"content-type":
                self.kind = value.lower()
        if status != 200 or (self.kind and not self.kind.startswith(_SSE)):
            self.excerpt = b""

    def received(self) -> None:
        """Decode this read's body at once: one split for every event it holds."""
        pieces = self.pieces
        piece = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        if self.excerpt is None:
            if self.decoder.feed(piece, self.last_byte - self.result.started):
                self.stop()
            return
        self.excerpt += piece
        if len(self.excerpt) >= ERROR_EXCERPT_CHARS:
            self.ended()
            self.stop()

    def ended(self) -> None:
        result = self.result
        if self.excerpt is None:
            self.decoder.end(self.last_byte - result.started)
            return
        excerpt = self.excerpt[:ERROR_EXCERPT_CHARS].decode("utf-8", "replace").strip()
        if result.status != 200:
            result.fail("http_error", f"HTTP {result.status}: {excerpt}")
        else:
            kind = self.kind.decode("latin-1")
            result.fail("stream_error", f"not an SSE stream: a {kind} body: {excerpt}")

    def failed(self, fault: Fault, detail: str) -> None:
        result = self.result
        if fault == "connect_timeout":
            result.fail("connect_error", f"connect timeout after {self.connect_timeout_s} s")
        elif fault == "connect":
            result.fail("connect_error", f"no response: cannot connect: {detail}")
        elif fault == "timeout":
            tokens = result.streamed_tokens
            result.fail("timeout", f"no byte within the read timeout (after {tokens} tokens)")
        elif fault == "recording":
            tokens = result.streamed_tokens
            result.fail(
                "stream_error", f"could not record the stream after {tokens} tokens: {detail}"
            )
        elif result.status is None:
            why = (
                "no valid HTTP response: "
                if fault == "invalid"
                else "no response: the connection closed"
            )
            result.fail("connect_error", why + detail)
        elif fault == "invalid":
            result.fail("stream_error", f"malformed HTTP response: {detail}")
        else:
            tokens = result.streamed_tokens
            result.fail(
                "stream_error", f"connection closed mid-stream after {tokens} tokens{detail}"
            )
