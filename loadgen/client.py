"""The streaming client: one chat completion over SSE, measured chunk by chunk, never raising.

Each call streams one request on its own connection and fills a :class:`StreamResult` as bytes
arrive, so a caller that is cancelled mid-stream still holds everything measured so far.
Transport failures are translated here, at the edge, into exactly one outcome: ``ok``,
``timeout`` (no byte for the client's read timeout, which httpx applies to every socket read,
so it counts from the last byte received; leaving the stream context closes the connection),
``http_error``, ``stream_error`` (an error object in a 200 stream, malformed SSE, no
``[DONE]``, or the connection dropped mid-stream) or ``connect_error`` (no response at all).

Token counting per chunk: a chunk's tokens are taken from per-token data when the server sends
it (``token_ids``, or ``logprobs.content`` entries); otherwise the chunk's text is counted in
whitespace-separated words, at least one for a non-empty text. That is exact for the simulator
(a token is a word) and an estimate elsewhere, so when the server's usage reports the
completion tokens, the per-chunk counts are rescaled to sum to that exact total.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from loadgen.records import Outcome
from loadgen.transport import LeanTransport

ERROR_EXCERPT_CHARS = 300


@dataclass(slots=True)
class StreamResult:
    """What one streamed request produced so far (complete once ``outcome`` is set)."""

    started: float = 0.0
    elapsed_s: float = 0.0
    ttft_s: float | None = None
    chunks: list[tuple[float, int]] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    outcome: Outcome | None = None
    error: str | None = None
    status: int | None = None
    done: bool = False

    @property
    def text(self) -> str:
        """The reply text as streamed (deltas concatenated verbatim)."""
        return "".join(self.parts)

    def fail(self, outcome: Outcome, error: str) -> None:
        if self.outcome is None:
            self.outcome, self.error = outcome, error


def make_client(
    read_timeout_s: float, connect_timeout_s: float, headers: Mapping[str, str] | None = None
) -> httpx.AsyncClient:
    """An async client with no connection cap: one connection per in-flight request.

    It runs on :class:`~loadgen.transport.LeanTransport` (plain asyncio sockets) for a lower
    cost per streamed token. Environment proxies are ignored: a load test talks to the engine
    directly.
    """
    timeout = httpx.Timeout(
        connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=None
    )
    return httpx.AsyncClient(
        timeout=timeout, transport=LeanTransport(), headers=dict(headers or {}), trust_env=False
    )


async def stream_chat(
    client: httpx.AsyncClient, url: str, body: Mapping[str, Any], result: StreamResult
) -> StreamResult:
    """POST a streaming request and fill ``result``; per-request failures become its outcome."""
    start = result.started = time.perf_counter()
    try:
        async with client.stream("POST", url, json=body) as response:
            result.status = response.status_code
            if response.status_code != 200:
                excerpt = await _excerpt(response)
                result.fail("http_error", f"HTTP {response.status_code}: {excerpt}")
            else:
                await _consume(response, result, start)
    except httpx.ConnectTimeout as exc:
        result.fail("connect_error", f"connect timeout: {exc!r}")
    except httpx.TimeoutException:
        tokens = sum(n for _, n in result.chunks)
        result.fail("timeout", f"no byte within the read timeout (after {tokens} tokens)")
    except httpx.TransportError as exc:
        if result.status is None:
            result.fail("connect_error", f"no response: {exc!r}")
        else:
            result.fail("stream_error", f"connection lost mid-stream: {exc!r}")
    finally:
        result.elapsed_s = time.perf_counter() - start
    if result.outcome is None:
        result.outcome = "ok"
        _rescale(result)
    return result


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


async def _consume(response: httpx.Response, result: StreamResult, start: float) -> None:
    buffer = b""
    data: list[bytes] = []
    async for piece in response.aiter_bytes():
        now = time.perf_counter() - start
        lines = (buffer + piece).split(b"\n")
        buffer = lines.pop()
        for raw in lines:
            line = raw.rstrip(b"\r")
            if not line:
                if data:
                    _on_event(b"\n".join(data), now, result)
                    data.clear()
            elif line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif not line.startswith(b":") and line.split(b":", 1)[0] not in _OTHER_FIELDS:
                result.fail("stream_error", f"malformed SSE line: {_show(line)}")
            if result.outcome is not None or result.done:
                return
    if data:  # an event the server did not terminate with a blank line
        _on_event(b"\n".join(data), time.perf_counter() - start, result)
    if not result.done:
        result.fail("stream_error", "stream ended without [DONE]")


_OTHER_FIELDS = (b"event", b"id", b"retry")


def _show(line: bytes) -> str:
    return line[:120].decode("utf-8", "replace")


def _on_event(data: bytes, now: float, result: StreamResult) -> None:
    if data.strip() == b"[DONE]":
        result.done = True
        return
    try:
        event = json.loads(data)
    except ValueError:
        result.fail("stream_error", f"malformed SSE data: {_show(data)}")
        return
    if not isinstance(event, dict):
        result.fail("stream_error", f"malformed SSE data: {_show(data)}")
        return
    if "error" in event:
        result.fail("stream_error", f"error in stream: {_error_message(event['error'])}")
        return
    usage = event.get("usage")
    if isinstance(usage, dict):
        _take_usage(usage, result)
    tokens = 0
    for choice in event.get("choices") or ():
        tokens += _choice_tokens(choice, result)
    if tokens:
        if result.ttft_s is None:
            result.ttft_s = now
        result.chunks.append((now, tokens))


def _choice_tokens(choice: Any, result: StreamResult) -> int:
    if not isinstance(choice, dict):
        return 0
    delta = choice.get("delta")
    pieces: list[str] = []
    if isinstance(delta, dict):
        pieces = [v for k in ("content", "reasoning_content") if isinstance(v := delta.get(k), str)]
        if isinstance(delta.get("content"), str):
            result.parts.append(delta["content"])
    elif isinstance(choice.get("text"), str):  # /v1/completions
        pieces = [choice["text"]]
        result.parts.append(choice["text"])
    if isinstance(choice.get("token_ids"), list):
        return len(choice["token_ids"])
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
        return len(logprobs["content"])
    return sum(max(1, len(p.split())) for p in pieces if p)


def _take_usage(usage: dict[str, Any], result: StreamResult) -> None:
    if isinstance(usage.get("prompt_tokens"), int):
        result.prompt_tokens = usage["prompt_tokens"]
    if isinstance(usage.get("completion_tokens"), int):
        result.completion_tokens = usage["completion_tokens"]
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        result.cached_tokens = details["cached_tokens"]


def _error_message(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message") or error.get("type") or error
        return str(message)[:ERROR_EXCERPT_CHARS]
    return str(error)[:ERROR_EXCERPT_CHARS]


def _rescale(result: StreamResult) -> None:
    """Make per-chunk counts sum to the server's exact completion count (largest remainder)."""
    total = sum(n for _, n in result.chunks)
    exact = result.completion_tokens
    if exact is None or total == 0 or total == exact:
        return
    shares = [n * exact / total for _, n in result.chunks]
    counts = [int(s) for s in shares]
    order = sorted(range(len(shares)), key=lambda i: counts[i] - shares[i])
    for i in order[: exact - sum(counts)]:
        counts[i] += 1
    result.chunks = [(t, c) for (t, _), c in zip(result.chunks, counts, strict=True) if c]
