"""Counting prompts on a server that speaks llama.cpp's token API: its `/tokenize` takes text
(`content`) and answers a messages body with no tokens, so preflight renders the chat template
with `/apply-template` and tokenizes that. A stand-in server on 127.0.0.1 port 0 plays the two
endpoints as llama.cpp's tools/server does (a word a token, plus the begin token)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.preflight import preflight
from tests.serving import asgi_server

TEMPLATE = "{role}: {content}\n"


def _answer(path: str, body: dict[str, Any]) -> dict[str, Any]:
    if path == "/v1/models":
        return {"object": "list", "data": [{"id": "tiny", "object": "model"}]}
    if path == "/apply-template":
        rendered = "".join(TEMPLATE.format(**m) for m in body["messages"])
        return {"prompt": rendered + "assistant: "}
    if path == "/tokenize":  # as llama.cpp: no `content`, no tokens
        content = body.get("content")
        words = content.split() if isinstance(content, str) else []
        return {"tokens": list(range(len(words) + bool(body.get("add_special"))))}
    raise KeyError(path)


@contextlib.asynccontextmanager
async def llamacpp_like() -> AsyncIterator[tuple[str, list[str]]]:
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.append(scope["path"])
        try:
            status, payload = 200, _answer(scope["path"], json.loads(raw or b"{}"))
        except KeyError:
            status, payload = 404, {"error": "not found"}
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": json.dumps(payload).encode()})

    async with asgi_server(app) as url:
        yield url, seen


async def test_preflight_counts_through_the_template_where_tokenize_ignores_messages() -> None:
    async with llamacpp_like() as (url, seen):
        info = await preflight(url, LoadConfig())
    assert (info.model, info.tokenize, info.additive) == ("tiny", "template", True)
    assert seen[:4] == ["/v1/models", "/tokenize", "/apply-template", "/tokenize"]


async def test_the_template_counter_counts_the_rendered_prompt_with_its_begin_token() -> None:
    import httpx

    from stallkit.loadgen.tokens import TemplateTokenCounter

    async with llamacpp_like() as (url, _), httpx.AsyncClient() as client:
        counter = TemplateTokenCounter(client, url)
        # "user:" "one" "two" "assistant:" and the begin token
        assert await counter.count([{"role": "user", "content": "one two"}]) == 5
