"""The launchers' warm-up request: one completion, with the API key the engine was started with.

The server here is a real HTTP server on 127.0.0.1 port 0 that guards `/v1/...` the way vLLM's
`--api-key` does (401 without `Authorization: Bearer KEY`) and leaves `/health` open.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stallkit.engine.errors import EngineError
from stallkit.engine.launch.base import engine_api_key, serve_first_request

KEY = "sekrit"


class _GuardedVllm(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]]

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _guarded(self) -> bool:
        self.seen.append((self.path, self.headers.get("Authorization")))
        if self.path.startswith("/v1/") and self.headers.get("Authorization") != f"Bearer {KEY}":
            self._reply(401, {"error": "Unauthorized"})
            return False
        return True

    def do_GET(self) -> None:
        if self._guarded():
            self._reply(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        if self._guarded():
            assert body["model"] == "tiny" and body["max_tokens"] == 1
            self._reply(200, {"choices": [{"text": " a", "index": 0}]})

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


@pytest.fixture
def guarded() -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    seen: list[tuple[str, str | None]] = []
    handler = type("Handler", (_GuardedVllm,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_the_engine_key_comes_from_its_arguments_before_its_environment() -> None:
    env = {"VLLM_API_KEY": "from-env"}
    assert engine_api_key(["--port", "8000", "--api-key", "from-args"], env) == "from-args"
    assert engine_api_key(["--api-key=inline"], env) == "inline"
    assert engine_api_key(["--port", "8000"], env) == "from-env"
    assert engine_api_key(["--port", "8000"], {"VLLM_API_KEY": ""}) is None
    assert engine_api_key(["--api-key"], {}) is None  # a flag without its value: vLLM refuses it
    # vLLM's parser keeps the last one (a kit's per-arm arguments come after its shared ones),
    # spelt either way; of the keys it lists, any is accepted
    assert engine_api_key(["--api-key", "shared", "--api_key", "arm", "x2"], env) == "arm"
    assert engine_api_key(["--api-key", "--port", "8000"], env) == "from-env"


def test_the_warm_up_sends_the_engines_key(
    guarded: tuple[str, list[tuple[str, str | None]]],
) -> None:
    url, seen = guarded
    serve_first_request(url, 5.0, "engine", None, KEY)
    assert seen == [("/v1/models", f"Bearer {KEY}"), ("/v1/completions", f"Bearer {KEY}")]


def test_a_refused_warm_up_is_one_engine_error_naming_the_status(
    guarded: tuple[str, list[tuple[str, str | None]]],
) -> None:
    url, seen = guarded
    with pytest.raises(
        EngineError, match=r"did not serve its first request \(HTTP 401 from /v1/models\)"
    ) as caught:
        serve_first_request(url, 5.0, "container stallkit-x", None, None)
    assert "\n" not in str(caught.value) and caught.value.hint
    assert seen == [("/v1/models", None)]  # refused at the model list: no completion was tried
