"""The streaming client against the hostile server: every misbehaviour becomes one outcome."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stallkit.loadgen.http.client import StreamResult, make_client, stream_chat

pytestmark = pytest.mark.wallclock

BODY: dict[str, Any] = {
    "model": "hostile",
    "messages": [{"role": "system", "content": "a b c"}, {"role": "user", "content": "d e"}],
    "max_tokens": 5,
    "stream": True,
    "stream_options": {"include_usage": True},
}


async def _stream(url: str, behaviour: str, read_timeout_s: float = 5.0) -> StreamResult:
    async with make_client(read_timeout_s, 2.0) as client:
        return await stream_chat(
            client, f"{url}/{behaviour}/v1/chat/completions", BODY, StreamResult()
        )


async def test_ok_stream_records_tokens_usage_and_text(hostile: Any) -> None:
    async with hostile() as server:
        result = await _stream(server.url, "ok")
    assert result.outcome == "ok" and result.error is None and result.status == 200
    assert [n for _, n in result.chunks] == [1] * 5
    assert result.ttft_s == result.chunks[0][0]
    assert result.prompt_tokens == 8  # <|system|> a b c <|user|> d e <|assistant|>
    assert result.completion_tokens == 5 and result.cached_tokens == 0
    assert result.text == " tok" * 5


async def test_several_tokens_per_chunk_are_counted(hostile: Any) -> None:
    async with hostile() as server:
        result = await _stream(server.url, "multi")
    assert result.outcome == "ok"
    assert [n for _, n in result.chunks] == [3, 2, 4]


async def test_stalled_stream_times_out_counted_from_the_last_token(hostile: Any) -> None:
    async with hostile(stall_tokens=3, gap_s=0.3) as server:
        result = await _stream(server.url, "stall", read_timeout_s=0.8)
    assert result.outcome == "timeout"
    assert len(result.chunks) == 3
    last_token_s = result.chunks[-1][0]
    assert last_token_s >= 0.5  # tokens kept coming past most of the read timeout...
    assert result.elapsed_s >= last_token_s + 0.8  # ...and the clock restarted at each one
    assert "read timeout" in (result.error or "")


async def test_slow_trickle_is_not_a_timeout(hostile: Any) -> None:
    async with hostile(trickle_tokens=6, trickle_gap_s=0.3) as server:
        result = await _stream(server.url, "trickle", read_timeout_s=1.0)
    assert result.outcome == "ok"
    assert result.elapsed_s > 1.0  # longer than the read timeout in total
    assert sum(n for _, n in result.chunks) == 6


async def test_error_object_in_a_200_stream(hostile: Any) -> None:
    async with hostile() as server:
        result = await _stream(server.url, "error")
    assert result.outcome == "stream_error" and result.status == 200
    assert "engine exploded" in (result.error or "")


async def test_malformed_sse_data(hostile: Any) -> None:
    async with hostile() as server:
        result = await _stream(server.url, "malformed")
    assert result.outcome == "stream_error"
    assert "malformed SSE data" in (result.error or "")


async def test_line_that_is_not_sse(hostile: Any) -> None:
    async with hostile() as server:
        result = await _stream(server.url, "garbage")
    assert result.outcome == "stream_error"
    assert "malformed SSE line" in (result.error or "")


async def test_stream_without_done(hostile: Any) -> None:
    async with hostile() as server:
        result = await _stream(server.url, "nodone")
    assert result.outcome == "stream_error"
    assert "[DONE]" in (result.error or "")
    assert result.completion_tokens == 2  # what arrived is still measured


async def test_http_500_keeps_status_and_body_excerpt(hostile: Any) -> None:
    async with hostile() as server:
        result = await _stream(server.url, "500")
    assert result.outcome == "http_error" and result.status == 500
    assert "internal boom" in (result.error or "")


async def test_connection_dropped_before_the_response(hostile: Any) -> None:
    async with hostile() as server:
        result = await _stream(server.url, "drop")
    assert result.outcome == "connect_error" and result.status is None


async def test_connection_dropped_mid_stream(hostile: Any) -> None:
    async with hostile() as server:
        result = await _stream(server.url, "dropmid")
    assert result.outcome == "stream_error"
    assert len(result.chunks) == 2


async def test_nothing_listening_is_a_connect_error(closed_port_url: str) -> None:
    result = await _stream(closed_port_url, "ok")
    assert result.outcome == "connect_error"


async def test_usage_total_rescales_estimated_chunk_counts() -> None:
    """A chunk's words are only an estimate off the simulator; usage has the exact total."""
    events = (
        b'data: {"choices":[{"delta":{"content":"hello world"}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"!"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":6}}\n\n'
        b"data: [DONE]\n\n"
    )

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(int(head.lower().split(b"content-length: ")[1].split(b"\r")[0]))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n" + events)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(reply, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    async with server, make_client(5.0, 2.0) as client:
        result = await stream_chat(client, url, BODY, StreamResult())
    assert result.outcome == "ok"
    assert [n for _, n in result.chunks] == [4, 2]  # 2:1 estimate scaled to 6


async def test_large_request_body_goes_through_write_flow_control(hostile: Any) -> None:
    words = " ".join(["w"] * 1_500_000)  # 3 MB, far above the transport's write buffer
    body = {**BODY, "messages": [{"role": "user", "content": words}]}
    async with hostile() as server, make_client(5.0, 2.0) as client:
        result = await stream_chat(
            client, f"{server.url}/ok/v1/chat/completions", body, StreamResult()
        )
    assert result.outcome == "ok"
    assert result.prompt_tokens == 1_500_000 + 2
