"""A face that raises while it takes a response ends that response as a fault of its own
(`recording`), on asyncio's loop and on uvloop's: the exception never reaches the loop, which
would print "Fatal error on transport" with a traceback and close the connection behind the
face's back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from stallkit.loadgen.http.wire import Exchange, Fault, Target
from tests.serving import threaded_server

pytestmark = pytest.mark.wallclock


class _Streaming(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"body")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    with threaded_server(ThreadingHTTPServer(("127.0.0.1", 0), _Streaming)) as served:
        yield served


class _Clumsy(Exchange):
    """A face whose callback `where` raises."""

    def __init__(self, where: str) -> None:
        super().__init__(read_timeout_s=5.0)
        self.where = where
        self.faults: list[tuple[Fault, str]] = []
        self.done = False

    def head(self) -> None:
        if self.where == "head":
            raise ValueError(f"no {self.where} for this")

    def received(self) -> None:
        if self.where == "received":
            raise ValueError(f"no {self.where} for this")

    def ended(self) -> None:
        if self.where == "ended":
            raise ValueError(f"no {self.where} for this")
        self.done = True

    def failed(self, fault: Fault, detail: str) -> None:
        self.faults.append((fault, detail))


def _loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "asyncio":
        return asyncio.new_event_loop()
    uvloop = pytest.importorskip("uvloop")
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
@pytest.mark.parametrize("where", ["head", "received", "ended"])
def test_a_face_that_raises_ends_its_response_as_a_fault(
    where: str, loop_kind: str, url: str
) -> None:
    reported: list[dict[str, Any]] = []
    face = _Clumsy(where)
    target = Target(httpx.URL(url + "/"), "GET", [(b"Host", b"127.0.0.1")])
    loop = _loop(loop_kind)
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        loop.run_until_complete(asyncio.wait_for(face.run(target, None, 5.0), 30.0))
    finally:
        loop.close()
    assert reported == []
    assert not face.done
    assert face.faults == [("recording", f"ValueError: no {where} for this")]
