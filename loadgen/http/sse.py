"""One streamed reply as data: the result it fills and the SSE decoder that fills it.

:class:`SseDecoder` is pure: it is fed the response body in whatever pieces the network
delivers, each with its arrival time, and records every event into a :class:`StreamResult`
(per-chunk token counts and times, the text, the usage, ``[DONE]``, or the first fault). It
knows nothing of the network: the streaming client feeds it each read's body, and a test can
feed it the body as any other client receives it. The decoder calls the result's
``on_first_token`` hook once, when it records the first token: the load generator resolves a
future there, so a queued request wakes its agent only when its first token has arrived.

Token counting per chunk: a chunk's tokens are taken from per-token data when the server sends
it (``token_ids``, or ``logprobs.content`` entries); otherwise the chunk's text is counted in
whitespace-separated words, at least one for a non-empty text. That is exact for the simulator
(a token is a word) and an estimate elsewhere, so when the server's usage reports the
completion tokens, :func:`rescale` makes the per-chunk counts sum to that exact total.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from stallkit.loadgen.records import Outcome

ERROR_EXCERPT_CHARS = 300
_OTHER_FIELDS = (b"event", b"id", b"retry")


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
    #: called once, as soon as the first token is recorded (``ttft_s`` and ``chunks`` are set)
    on_first_token: Callable[[], object] | None = field(default=None, repr=False, compare=False)

    @property
    def text(self) -> str:
        """The reply text as streamed (deltas concatenated verbatim)."""
        return "".join(self.parts)

    @property
    def streamed_tokens(self) -> int:
        """Tokens counted over the chunks so far."""
        return sum(n for _, n in self.chunks)

    def fail(self, outcome: Outcome, error: str) -> None:
        """Record the first failure; later ones do not overwrite it."""
        if self.outcome is None:
            self.outcome, self.error = outcome, error


class SseDecoder:
    """Splits a body into SSE events and records each one; ``feed`` says when to stop reading.

    The buffer holds the text of the event still open (after the last blank line). An event of
    one ``data:`` line, which is what inference servers send, takes a fast path.
    """

    __slots__ = ("_buffer", "result")

    def __init__(self, result: StreamResult) -> None:
        self.result = result
        self._buffer = b""

    def feed(self, piece: bytes, now: float) -> bool:
        """Take the next piece of body, ``now`` s after the request started; True when finished."""
        text = self._buffer + piece if self._buffer else piece
        if b"\r" in text:
            text = text.replace(b"\r\n", b"\n")
        events = text.split(b"\n\n")
        self._buffer = events.pop()
        result = self.result
        for event in events:
            if event.startswith(b"data: ") and b"\n" not in event:
                _on_event(event[6:], now, result)
            elif event:
                self._lines(event.split(b"\n"), now)
            if result.outcome is not None or result.done:
                return True
        return False

    def end(self, now: float) -> None:
        """The body ended: record an event left without its blank line, then check ``[DONE]``."""
        result = self.result
        if result.outcome is not None or result.done:
            return
        lines = self._buffer.split(b"\n")
        partial = lines.pop()  # a line without its newline is not taken
        if lines:  # lenient: an event the server did not end with a blank line
            self._lines(lines, now)
        if result.outcome is None and not result.done:
            tail = f" (left an unterminated line: {show(partial)})" if partial else ""
            result.fail("stream_error", f"stream ended without [DONE]{tail}")

    def _lines(self, lines: list[bytes], now: float) -> None:
        """One event given line by line: blank lines, comments, ``data:`` and other fields."""
        result = self.result
        data: list[bytes] = []
        for line in lines:
            if line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif line and not line.startswith(b":") and line.split(b":", 1)[0] not in _OTHER_FIELDS:
                result.fail("stream_error", f"malformed SSE line: {show(line)}")
                return
        if data:
            _on_event(b"\n".join(data), now, result)


def show(line: bytes) -> str:
    """A short printable excerpt of raw bytes."""
    return line[:120].decode("utf-8", "replace")


def _on_event(data: bytes, now: float, result: StreamResult) -> None:
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError:
        if data.strip() == b"[DONE]":
            result.done = True
        else:
            result.fail("stream_error", f"malformed SSE data: {show(data)}")
        return
    if not isinstance(event, dict):
        result.fail("stream_error", f"malformed SSE data: {show(data)}")
        return
    if "error" in event:
        result.fail("stream_error", f"error in stream: {_error_message(event['error'])}")
        return
    usage = event.get("usage")
    if usage.__class__ is dict:
        _take_usage(usage, result)
    tokens = 0
    for choice in event.get("choices") or ():
        tokens += _choice_tokens(choice, result)
    if tokens:
        result.chunks.append((now, tokens))
        if result.ttft_s is None:
            result.ttft_s = now
            if result.on_first_token is not None:
                result.on_first_token()


def _choice_tokens(choice: Any, result: StreamResult) -> int:
    if choice.__class__ is not dict:
        return 0
    words = 0
    delta = choice.get("delta")
    if delta.__class__ is dict:
        content = delta.get("content")
        if content.__class__ is str:
            result.parts.append(content)
            if content:
                words = len(content.split()) or 1
        reasoning = delta.get("reasoning_content")
        if reasoning.__class__ is str and reasoning:
            words += len(reasoning.split()) or 1
    elif (text := choice.get("text")).__class__ is str:  # /v1/completions
        result.parts.append(text)
        if text:
            words = len(text.split()) or 1
    if "token_ids" in choice and choice["token_ids"].__class__ is list:
        return len(choice["token_ids"])
    logprobs = choice.get("logprobs")
    if logprobs.__class__ is dict and logprobs.get("content").__class__ is list:
        return len(logprobs["content"])
    return words


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


def rescale(result: StreamResult) -> None:
    """Make per-chunk counts sum to the server's exact completion count (largest remainder)."""
    total = result.streamed_tokens
    exact = result.completion_tokens
    if exact is None or total == 0 or total == exact:
        return
    shares = [n * exact / total for _, n in result.chunks]
    counts = [int(s) for s in shares]
    order = sorted(range(len(shares)), key=lambda i: counts[i] - shares[i])
    for i in order[: exact - sum(counts)]:
        counts[i] += 1
    result.chunks = [(t, c) for (t, _), c in zip(result.chunks, counts, strict=True) if c]
