"""The simulator's HTTP routes: vLLM's OpenAI-compatible surface over an `EngineDriver`.

Chat and text completions (streaming SSE with `stream_options.include_usage`, and plain
JSON), `/tokenize`, `/v1/models`, `/health`, `/version`, `/metrics` and the DCGM-format
`/dcgm/metrics`, and the scheduler's state for forensics at `/debug/state`. A client that goes away mid-request aborts it in the engine. Every refusal
is an OpenAI-style JSON error with its status; an unexpected failure is logged and answered
with a 500 body, and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from stallkit.engine.serve import api
from stallkit.engine.serve.api import ApiError, GenRequest, JsonObj, ResponseHead
from stallkit.engine.serve.driver import EngineDriver, RequestStream
from stallkit.engine.sim.core import SimRequestError

log = logging.getLogger("stallkit.engine.sim")

VERSION = "0.32.0+stallkit.sim"
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
Handler = Callable[[Request], Awaitable[Response]]


def _json(body: JsonObj, status: int = 200) -> Response:
    content = json.dumps(body, separators=(",", ":")).encode()
    return Response(content, status_code=status, media_type="application/json")


def _error(exc: ApiError) -> Response:
    return _json(api.api_error_body(exc), exc.status)


def _guarded(handler: Handler) -> Handler:
    """Map refusals to their JSON error and anything unexpected to a logged 500."""

    async def wrapper(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            return _error(exc)
        except Exception:
            log.exception("internal error serving %s", request.url.path)
            return _json(api.error_body(500, "internal server error", "InternalServerError"), 500)

    return wrapper


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class _EngineStream(StreamingResponse):
    """An SSE response that aborts its request however it ends early (client gone before or
    during the stream, server stopping); aborting a finished request does nothing."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(
            content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


class Routes:
    """Route handlers bound to one driver."""

    def __init__(self, driver: EngineDriver, fail_metrics_at_s: float | None) -> None:
        self.driver = driver
        self.config = driver.config
        self.fail_metrics_at_s = fail_metrics_at_s
        self.created = int(time.time())

    # -- generation -------------------------------------------------------------------------
    async def chat(self, request: Request) -> Response:
        return await self._generate(request, "chat")

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, "completion")

    async def _generate(self, request: Request, kind: api.Kind) -> Response:
        body = api.parse_json_object(await request.body())
        cfg = self.config
        req = api.parse_generation(body, kind, cfg.model_name, self.driver.longest_request)
        try:
            stream = self.driver.submit(req.prompt, req.max_tokens)
        except SimRequestError as exc:
            raise ApiError(str(exc)) from None
        prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
        head = ResponseHead(kind, prefix + uuid.uuid4().hex, int(time.time()), req.model)
        if req.stream:
            return _EngineStream(
                self._events(req, head, stream), lambda: self.driver.abort(stream.request_id)
            )
        return await self._complete(request, req, head, stream)

    def _usage(self, req: GenRequest, stream: RequestStream, streamed: int) -> JsonObj:
        prompt, completion, cached = self.driver.request_info_usage(stream.request_id)
        if prompt == 0:
            prompt, completion = len(req.prompt), streamed
        return api.usage(prompt, completion, cached)

    async def _events(
        self, req: GenRequest, head: ResponseHead, stream: RequestStream
    ) -> AsyncIterator[bytes]:
        streamed = 0
        if req.kind == "chat":
            yield head.chunk(None, None, role=True)
        while True:
            words, reason = await stream.next_batch()
            streamed += len(words)
            yield head.chunk(api.words_text(words), reason)
            if reason is not None:
                break
        if req.include_usage:
            yield head.usage_chunk(self._usage(req, stream, streamed))
        yield api.SSE_DONE

    async def _complete(
        self, request: Request, req: GenRequest, head: ResponseHead, stream: RequestStream
    ) -> Response:
        async def collect() -> tuple[list[str], str]:
            words: list[str] = []
            while True:
                batch, reason = await stream.next_batch()
                words.extend(batch)
                if reason is not None:
                    return words, reason

        collector = asyncio.ensure_future(collect())
        watcher = asyncio.ensure_future(_wait_disconnect(request.receive))
        try:
            await asyncio.wait({collector, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            gone = not collector.done()
            if gone:  # the client went away (or the server is stopping): abort
                collector.cancel()
                self.driver.abort(stream.request_id)
        if gone:
            return Response(status_code=499)
        words, reason = collector.result()
        usage = self._usage(req, stream, len(words))
        return _json(head.full(api.words_text(words), reason, usage))

    # -- the rest ---------------------------------------------------------------------------
    async def tokenize(self, request: Request) -> Response:
        body = api.parse_json_object(await request.body())
        tokens = api.parse_tokenize(body, self.config.model_name)
        ids = api.token_ids(tokens)
        return _json({"count": len(ids), "max_model_len": self.config.max_model_len, "tokens": ids})

    async def models(self, request: Request) -> Response:
        name = self.config.model_name
        model = {
            "id": name,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": name,
            "parent": None,
            "max_model_len": self.config.max_model_len,
        }
        return _json({"object": "list", "data": [model]})

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def version(self, request: Request) -> Response:
        return _json({"version": VERSION})

    async def metrics(self, request: Request) -> Response:
        fail_at = self.fail_metrics_at_s
        if fail_at is not None and self.driver.now() >= fail_at:
            return _json(api.error_body(503, "metrics unavailable", "ServiceUnavailable"), 503)
        text = self.driver.metrics.render(self.driver.engine.stats, self.driver.now())
        return Response(text, media_type=PROMETHEUS_TEXT)

    async def state(self, request: Request) -> Response:
        state = self.driver.engine.debug_state(self.driver.now())
        return _json(state.model_dump(mode="json"))

    async def dcgm(self, request: Request) -> Response:
        return Response(
            self.driver.metrics.render_dcgm(self.driver.now()), media_type=PROMETHEUS_TEXT
        )


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    message = exc.detail if isinstance(exc, HTTPException) else "internal server error"
    return _json(api.error_body(status, str(message), ApiError("", status).error_type), status)


def build_app(driver: EngineDriver, fail_metrics_at_s: float | None = None) -> Starlette:
    """The ASGI app serving `driver` like vLLM's OpenAI-compatible server."""
    r = Routes(driver, fail_metrics_at_s)
    routes = [
        Route("/v1/chat/completions", _guarded(r.chat), methods=["POST"]),
        Route("/v1/completions", _guarded(r.completions), methods=["POST"]),
        Route("/tokenize", _guarded(r.tokenize), methods=["POST"]),
        Route("/v1/models", _guarded(r.models), methods=["GET"]),
        Route("/health", r.health, methods=["GET"]),
        Route("/version", r.version, methods=["GET"]),
        Route("/metrics", _guarded(r.metrics), methods=["GET"]),
        Route("/dcgm/metrics", _guarded(r.dcgm), methods=["GET"]),
        Route("/debug/state", _guarded(r.state), methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
