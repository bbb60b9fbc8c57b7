"""The streaming client: one chat completion over SSE, measured chunk by chunk, never raising.

Each call streams one request on its own connection and fills a :class:`StreamResult` as bytes
arrive, so a caller that is cancelled mid-stream still holds everything measured so far.
Failures are translated here, at the edge, into exactly one outcome: ``ok``, ``timeout`` (no
byte for the client's read timeout, counted from the last byte received), ``http_error``,
``stream_error`` (an error object in a 200 stream, malformed SSE, a 200 that is not an SSE
stream, no ``[DONE]``, or the connection closed mid-stream) or ``connect_error`` (no response
at all). The error message names which.

A client from :func:`make_client` is an ordinary ``httpx.AsyncClient`` (the preflight and the
token counter use it as such) that streams replies on the fast wire of :mod:`stallkit.loadgen.http.wire`;
any other httpx client streams through httpx itself. Both feed the one SSE decoder
(:mod:`stallkit.loadgen.http.sse`), so they record the same chunks, tokens and outcomes.
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
from stallkit.loadgen.http.wire import Target, stream_post

__all__ = ["ERROR_EXCERPT_CHARS", "StreamResult", "StreamingClient", "make_client", "stream_chat"]


class StreamingClient(httpx.AsyncClient):
    """An httpx client whose streamed chat completions take the fast wire."""

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
        self._stream_headers = dict(headers)
        self._targets: dict[str, Target | str] = {}
        self._posts: dict[str, tuple[httpx.URL, bytes] | None] = {}

    async def post(
        self, url: httpx.URL | str, *, json: Any = None, **options: Any
    ) -> httpx.Response:
        """``httpx.AsyncClient.post``; a plain JSON post (``/tokenize`` before every turn) goes
        straight to the wire, skipping the client's request and response machinery."""
        key = str(url)
        if key not in self._posts:
            fast = url_problem(key) is None  # else httpx says what is wrong with it
            parsed = httpx.URL(url)
            self._posts[key] = (parsed, _post_head(parsed, self._stream_headers)) if fast else None
        known = self._posts[key]
        if options or json is None or known is None:
            return await super().post(url, json=json, **options)
        parsed, head = known
        payload = orjson.dumps(json)
        request = b"%s\r\nContent-Length: %d\r\n\r\n%s" % (head, len(payload), payload)
        response = await exchange(parsed, request, self.connect_timeout_s, self.read_timeout_s)
        response.request = httpx.Request("POST", parsed)
        return response

    def target(self, url: str) -> Target | str:
        """The parsed target of ``url``, or why it cannot be streamed to (cached per URL)."""
        found = self._targets.get(url)
        if found is None:
            found = self._targets[url] = _target(url, self._stream_headers)
        return found


def _post_head(url: httpx.URL, headers: Mapping[str, str]) -> bytes:
    lines = [
        b"POST %s HTTP/1.1" % url.raw_path,
        b"Host: %s" % url.netloc,
        b"Content-Type: application/json",
        b"Accept: application/json",
        *(f"{k}: {v}".encode("latin-1") for k, v in headers.items()),
    ]
    return b"\r\n".join(lines)


def _target(url: str, headers: Mapping[str, str]) -> Target | str:
    problem = url_problem(url)  # the contract's rule, in the words kit load and url: use
    if problem is not None:
        return f"bad URL {url!r}: {problem}"
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        return f"bad URL {url!r}: {exc}"
    path = parsed.raw_path.decode("ascii")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return Target(parsed.scheme, parsed.host, port, path, headers)


def make_client(
    read_timeout_s: float, connect_timeout_s: float, headers: Mapping[str, str] | None = None
) -> StreamingClient:
    """An async client with no connection cap: one connection per in-flight request.

    Environment proxies are ignored: a load test talks to the engine directly.
    """
    return StreamingClient(read_timeout_s, connect_timeout_s, headers or {})


async def stream_chat(
    client: httpx.AsyncClient, url: str, body: Mapping[str, Any], result: StreamResult
) -> StreamResult:
    """POST a streaming request and fill ``result``; per-request failures become its outcome."""
    start = result.started = time.perf_counter()
    try:
        if isinstance(client, StreamingClient):
            target = client.target(url)
            if isinstance(target, str):
                result.fail("connect_error", target)
            else:
                payload = orjson.dumps(body)
                await stream_post(
                    target, payload, result, client.read_timeout_s, client.connect_timeout_s
                )
        else:
            await _stream_httpx(client, url, body, result)
    finally:
        result.elapsed_s = time.perf_counter() - start
    if result.outcome is None:
        result.outcome = "ok"
        rescale(result)
    return result


async def _stream_httpx(
    client: httpx.AsyncClient, url: str, body: Mapping[str, Any], result: StreamResult
) -> None:
    try:
        async with client.stream("POST", url, json=body) as response:
            result.status = response.status_code
            if response.status_code != 200:
                excerpt = await _excerpt(response)
                result.fail("http_error", f"HTTP {response.status_code}: {excerpt}")
                return
            kind = response.headers.get("content-type", "").lower()
            if kind and not kind.startswith("text/event-stream"):
                excerpt = await _excerpt(response)
                result.fail("stream_error", f"not an SSE stream: a {kind} body: {excerpt}")
                return
            await _consume(response, result)
    except httpx.ConnectTimeout as exc:
        result.fail("connect_error", f"connect timeout: {exc!r}")
    except httpx.TimeoutException:
        tokens = result.streamed_tokens
        result.fail("timeout", f"no byte within the read timeout (after {tokens} tokens)")
    except httpx.TransportError as exc:
        if result.status is None:
            result.fail("connect_error", f"no response: {exc!r}")
        else:
            tokens = result.streamed_tokens
            result.fail(
                "stream_error", f"connection closed mid-stream after {tokens} tokens: {exc!r}"
            )


async def _excerpt(response: httpx.Response) -> str:
    body = b""
    try:
        async for piece in response.aiter_bytes():
            body += piece
            if len(body) >= ERROR_EXCERPT_CHARS:
                break
    except httpx.TransportError:
        pass  # the status is the finding; a truncated body is fine
    return body[:ERROR_EXCERPT_CHARS].decode("utf-8", "replace").strip()


async def _consume(response: httpx.Response, result: StreamResult) -> None:
    decoder = SseDecoder(result)
    start = result.started
    async for piece in response.aiter_bytes():
        if decoder.feed(piece, time.perf_counter() - start):
            return
    decoder.end(time.perf_counter() - start)
