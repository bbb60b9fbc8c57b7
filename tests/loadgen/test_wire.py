"""The stack records what httpx records, fault by fault, and names each fault.

Every misbehaviour of the hostile server is streamed three ways: by ``stream_chat`` (the
client ``make_client`` returns), and by a reference streamer written here on httpx, once
through stock httpx (httpcore's parser: an independent HTTP/1.1 implementation) and once
through httpx on the lean transport (the stack's httpx face). The chunks, tokens, TTFT, usage,
text and outcome must agree.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from stallkit.loadgen.http.client import StreamResult, make_client, stream_chat
from stallkit.loadgen.http.sse import ERROR_EXCERPT_CHARS, SseDecoder, rescale
from stallkit.loadgen.http.transport import LeanTransport

from .conftest import BEHAVIOURS

pytestmark = pytest.mark.wallclock

BODY: dict[str, Any] = {
    "model": "hostile",
    "messages": [{"role": "user", "content": "a b c"}],
    "max_tokens": 5,
    "stream": True,
    "stream_options": {"include_usage": True},
}
OPTIONS = {"stall_tokens": 2, "gap_s": 0.05, "trickle_gap_s": 0.05, "hold_s": 5.0}
READ_TIMEOUT_S = 1.0  # far above the trickle's gaps, so only the stall times out


def _seen(result: StreamResult) -> dict[str, Any]:
    """What must agree between wires (times differ run to run; their shape must not)."""
    times = [t for t, _ in result.chunks]
    assert times == sorted(times) and all(t >= 0 for t in times)
    assert result.ttft_s == (times[0] if times else None)
    assert result.elapsed_s >= (times[-1] if times else 0.0)
    return {
        "outcome": result.outcome,
        "kind": (result.error or "").split(":")[0].split(" after ")[0],
        "status": result.status,
        "tokens": [n for _, n in result.chunks],
        "text": result.text,
        "usage": (result.prompt_tokens, result.completion_tokens, result.cached_tokens),
        "done": result.done,
    }


async def _three_ways(
    url: str, new_result: Callable[[], StreamResult] = StreamResult
) -> list[dict[str, Any]]:
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=2.0)
    seen = []
    async with make_client(READ_TIMEOUT_S, 2.0) as fast:
        seen.append(_seen(await stream_chat(fast, url, BODY, new_result())))
    for transport in (None, LeanTransport()):
        async with httpx.AsyncClient(timeout=timeout, transport=transport) as plain:
            seen.append(_seen(await _reference(plain, url, new_result())))
    return seen


async def _reference(client: httpx.AsyncClient, url: str, result: StreamResult) -> StreamResult:
    """The oracle: stream with httpx, feed the same decoder, name faults by httpx's exceptions."""
    result.started = time.perf_counter()
    try:
        async with client.stream("POST", url, json=BODY) as response:
            result.status = response.status_code
            kind = response.headers.get("content-type", "").lower()
            if response.status_code != 200:
                result.fail(
                    "http_error", f"HTTP {response.status_code}: {await _excerpt(response)}"
                )
            elif kind and not kind.startswith("text/event-stream"):
                result.fail("stream_error", f"not an SSE stream: a {kind} body")
            else:
                decoder = SseDecoder(result)
                async for piece in response.aiter_bytes():
                    if decoder.feed(piece, time.perf_counter() - result.started):
                        break
                else:
                    decoder.end(time.perf_counter() - result.started)
    except httpx.TimeoutException:
        tokens = result.streamed_tokens
        result.fail("timeout", f"no byte within the read timeout (after {tokens} tokens)")
    except httpx.TransportError as exc:
        if result.status is None:
            result.fail("connect_error", f"no response: {exc!r}")
        else:
            tokens = result.streamed_tokens
            result.fail("stream_error", f"connection closed mid-stream after {tokens} tokens")
    result.elapsed_s = time.perf_counter() - result.started
    if result.outcome is None:
        result.outcome = "ok"
        rescale(result)
    return result


async def _excerpt(response: httpx.Response) -> str:
    body = b""
    async for piece in response.aiter_bytes():
        body += piece
    return body[:ERROR_EXCERPT_CHARS].decode("utf-8", "replace").strip()


@pytest.mark.parametrize("behaviour", BEHAVIOURS)
async def test_fast_wire_records_what_httpx_records(hostile: Any, behaviour: str) -> None:
    async with hostile(**OPTIONS) as server:
        fast, stock, lean = await _three_ways(f"{server.url}/{behaviour}/v1/chat/completions")
    assert fast == stock == lean


async def test_every_wire_calls_the_first_token_hook_once_as_it_records_the_token(
    hostile: Any,
) -> None:
    calls: list[tuple[float | None, int]] = []
    results: list[StreamResult] = []

    def hooked() -> StreamResult:
        result = StreamResult()
        result.on_first_token = lambda: calls.append((result.ttft_s, len(result.chunks)))
        results.append(result)
        return result

    async with hostile(**OPTIONS) as server:
        for behaviour in ("trickle", "500"):
            await _three_ways(f"{server.url}/{behaviour}/v1/chat/completions", hooked)
    trickled = results[:3]
    assert all(len(r.chunks) == 6 for r in trickled)
    assert calls == [(r.ttft_s, 1) for r in trickled]  # once per streamed reply; none for a 500


def test_the_first_token_hook_waits_for_a_token_not_the_first_event() -> None:
    calls: list[int] = []
    result = StreamResult(on_first_token=lambda: calls.append(len(result.chunks)))
    decoder = SseDecoder(result)
    decoder.feed(b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n', 1.0)
    assert calls == [] and result.ttft_s is None  # a role-only event carries no token
    decoder.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n' * 2, 2.0)
    assert calls == [1] and result.ttft_s == 2.0


async def test_faults_are_named_by_what_happened(hostile: Any) -> None:
    async with hostile(**OPTIONS) as server, make_client(READ_TIMEOUT_S, 2.0) as client:
        results = {
            b: await stream_chat(
                client, f"{server.url}/{b}/v1/chat/completions", BODY, StreamResult()
            )
            for b in ("dropmid", "json", "nodone", "unframed", "drop", "stall")
        }
    errors = {b: r.error or "" for b, r in results.items()}
    assert errors["dropmid"].startswith("connection closed mid-stream after 2 tokens")
    assert errors["json"].startswith("not an SSE stream: a application/json body: {")
    assert errors["nodone"] == "stream ended without [DONE]"
    assert results["unframed"].outcome == "ok" and len(results["unframed"].chunks) == 3
    assert errors["drop"].startswith("no response")
    assert results["drop"].outcome == "connect_error"
    assert errors["stall"] == "no byte within the read timeout (after 2 tokens)"
    assert len(set(errors.values())) == len(errors)


async def test_bad_urls_are_connect_errors_that_say_why() -> None:
    async with make_client(1.0, 1.0) as client:
        ftp = await stream_chat(client, "ftp://127.0.0.1:21/x", BODY, StreamResult())
        bare = await stream_chat(client, "127.0.0.1:8000/v1/chat/completions", BODY, StreamResult())
        port = await stream_chat(client, "http://127.0.0.1:x/v1", BODY, StreamResult())
    assert ftp.outcome == bare.outcome == port.outcome == "connect_error"
    assert (
        port.error
        == "bad URL 'http://127.0.0.1:x/v1': the URL's port is not a number from 0 to 65535"
    )
    # the contract's words for each mistake (stallkit.contract.urls), as kit load and url: say them
    assert (
        ftp.error
        == "bad URL 'ftp://127.0.0.1:21/x': unsupported URL scheme 'ftp' (use http:// or https://)"
    )
    assert bare.error == (
        "bad URL '127.0.0.1:8000/v1/chat/completions': the URL has no scheme (use http:// or https://)"
    )


@pytest.mark.parametrize("cut", [1, 2, 5, 7, 13, 40])
def test_decoder_gives_the_same_events_however_the_body_is_cut(cut: int) -> None:
    body = (
        b": a comment\r\n\r\n"
        b'data: {"choices":[{"delta":{"content":"one two"}}]}\r\n\r\n'
        b"event: message\n"
        b'data: {"choices":[{"delta":{"content":" three"},\n'
        b'data: "token_ids":[7,8,9]}]}\n\n\n'
        b'data:{"choices":[{"text":"x"}],"usage":{"completion_tokens":6}}\n\n'
        b"data: [DONE]\n\n"
    )
    result = StreamResult()
    decoder = SseDecoder(result)
    finished = False
    for i in range(0, len(body), cut):
        assert not finished
        finished = decoder.feed(body[i : i + cut], float(i))
    assert finished and result.done and result.outcome is None
    assert [n for _, n in result.chunks] == [2, 3, 1]
    assert result.text == "one two threex" and result.completion_tokens == 6


def test_an_event_left_open_at_the_end_is_still_taken() -> None:
    result = StreamResult()
    decoder = SseDecoder(result)
    decoder.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n', 1.0)
    decoder.end(2.0)
    assert result.done and result.outcome is None and result.chunks == [(1.0, 1)]
    left = StreamResult()
    decoder = SseDecoder(left)
    decoder.feed(b'{"object": "chat.completion"}', 0.0)
    decoder.end(1.0)
    assert left.outcome == "stream_error"
    assert (
        left.error
        == 'stream ended without [DONE] (left an unterminated line: {"object": "chat.completion"})'
    )


async def test_json_post_on_the_wire_answers_like_httpx(hostile: Any, closed_port_url: str) -> None:
    messages = [{"role": "user", "content": "a b c"}]
    async with hostile() as server, make_client(2.0, 2.0, {"X-Probe": "1"}) as fast:
        plain = httpx.AsyncClient()
        async with plain:
            for path in ("/tokenize", "/nothing-here"):
                ours = await fast.post(server.url + path, json={"messages": messages})
                theirs = await plain.post(server.url + path, json={"messages": messages})
                assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())
                assert ours.request.url == theirs.request.url
        with pytest.raises(httpx.ConnectError):
            await fast.post(closed_port_url + "/tokenize", json={"messages": messages})
    assert ours.status_code == 404
    assert server.requests.count("POST /tokenize") == 2


@pytest.mark.parametrize(
    ("behaviour", "error", "words"),
    [
        ("silent", httpx.ReadTimeout, "no data within the read timeout"),
        ("drop", httpx.RemoteProtocolError, "the server closed the connection before the response"),
        ("dropmid", httpx.RemoteProtocolError, "the server closed the connection mid-body"),
    ],
)
async def test_the_httpx_face_raises_httpx_errors_named_by_what_happened(
    hostile: Any, behaviour: str, error: type[httpx.TransportError], words: str
) -> None:
    async with hostile(**OPTIONS) as server, make_client(READ_TIMEOUT_S, 2.0) as client:
        url = f"{server.url}/{behaviour}/v1/chat/completions"
        with pytest.raises(error, match=words):  # the JSON post's short way
            await client.post(url, json=BODY)
        with pytest.raises(error, match=words):  # httpx's own way, on the lean transport
            await client.request("POST", url, json=BODY)
    assert server.requests.count(f"POST /{behaviour}/v1/chat/completions") == 2
