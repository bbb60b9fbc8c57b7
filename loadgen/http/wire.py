"""The one HTTP/1.1 stack: a request on its own connection, its response parsed in C as it arrives.

Both faces of the load generator's HTTP sit on it: the streamed chat completions
(:mod:`stallkit.loadgen.http.client`, which records each SSE chunk into the turn's result) and
the httpx transport (:mod:`stallkit.loadgen.http.transport`, for the model list and
``/tokenize``). A token stream arrives as one small socket read per token, so the cost per read
decides how many streams one process can feed: the whole response is handled inside an asyncio
``Protocol`` whose ``data_received`` stamps the arrival time, feeds httptools' C parser and
hands the read's body to the face at once. No coroutine wakes per read unless the face asks.

The timeouts and the naming of failures live here and only here. The connect timeout bounds
opening the connection; the read timeout is one timer, re-armed lazily from the time of the
last byte, so a read costs no timer work. Whatever goes wrong reaches the face once, as a
:data:`Fault` with its detail, and each face words it in its own terms (a turn's outcome, an
httpx exception).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Iterable
from typing import Literal

import httptools
import httpx

__all__ = ["Exchange", "Fault", "Target", "default_tls"]

#: what went wrong: ``connect`` no connection (the detail says why), ``connect_timeout`` none
#: within the connect timeout, ``invalid`` a response httptools cannot parse (the detail says
#: why), ``closed`` the connection closed before the response or before a framed body's end (the
#: detail is ``""`` or ``": <reason>"``), ``timeout`` no byte within the read timeout,
#: ``recording`` the face failed to take what arrived (the detail names its exception)
Fault = Literal["connect", "connect_timeout", "invalid", "closed", "timeout", "recording"]


class Target:
    """Where a request goes, and its head: the request line and headers, without a length."""

    __slots__ = ("head", "host", "port", "tls")

    def __init__(self, url: httpx.URL, method: str, headers: Iterable[tuple[bytes, bytes]]) -> None:
        self.host, self.tls = url.host, url.scheme == "https"
        self.port = url.port or (443 if self.tls else 80)
        lines = [b"%s %s HTTP/1.1" % (method.encode("ascii"), url.raw_path)]
        lines += [b"%s: %s" % (name, value) for name, value in headers]
        self.head = b"\r\n".join(lines)


@functools.cache
def default_tls() -> ssl.SSLContext:
    """One verifying TLS context for every https request (building one loads the CA store)."""
    return ssl.create_default_context()


class Exchange(asyncio.Protocol):
    """One request and its response as it arrives; the response ends or fails exactly once.

    A face subclasses it and is called back: ``head`` when the status and headers are in,
    ``received`` after a read that brought body (in ``pieces``; the face takes them), ``ended``
    when the body is complete, ``failed`` with the :data:`Fault` that ended it instead. After
    the end (``over``) nothing more is taken. A face may end the response early with ``stop``;
    ``wait`` sleeps until the end, or until the face's own ``wake``.
    """

    def __init__(self, read_timeout_s: float | None) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.read_timeout_s = read_timeout_s
        self.connect_timeout_s: float | None = None
        self.target: Target | None = None
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.pieces: list[bytes] = []
        self.last_byte = 0.0
        self.over = False
        self._framed = False  # a length or chunked framing: EOF before its end is a loss
        self._complete = False
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None

    # -- the face's callbacks ------------------------------------------------------------------
    def head(self) -> None:
        """The status and headers are in."""

    def received(self) -> None:
        """A read brought body, now in ``pieces``."""

    def ended(self) -> None:
        """The body is complete."""

    def failed(self, fault: Fault, detail: str) -> None:
        """The response failed (the fault's detail is described at :data:`Fault`)."""

    # -- the request ---------------------------------------------------------------------------
    async def open(
        self, target: Target, body: bytes | None, connect_timeout_s: float | None
    ) -> bool:
        """Connect and send the request (``body`` None: no body, no length); False on a fault."""
        self.target, self.connect_timeout_s = target, connect_timeout_s
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(connect_timeout_s):
                transport, _ = await loop.create_connection(
                    lambda: self,
                    target.host,
                    target.port,
                    ssl=default_tls() if target.tls else None,
                    server_hostname=target.host if target.tls else None,
                )
        except TimeoutError:
            self.fail("connect_timeout", "")
            return False
        except OSError as exc:  # ssl.SSLError is one
            self.fail("connect", str(exc))
            return False
        self._transport = transport
        self.last_byte = time.perf_counter()
        if body is None:
            transport.write(target.head + b"\r\n\r\n")
        else:  # one writev on uvloop, and a large body is not copied
            transport.writelines(
                (b"%s\r\nContent-Length: %d\r\n\r\n" % (target.head, len(body)), body)
            )
        if self.read_timeout_s is not None:
            self._timer = loop.call_later(self.read_timeout_s, self._watch)
        return True

    async def run(
        self, target: Target, body: bytes | None, connect_timeout_s: float | None
    ) -> None:
        """Send the request and sleep until its response ends or fails; then close.

        Cancelling the caller closes the connection at once; the face keeps what it took.
        """
        try:
            if await self.open(target, body, connect_timeout_s):
                while not self.over:
                    await self.wait()
        finally:
            self.close()

    async def wait(self) -> None:
        """Sleep until the response is over, or the face wakes the waiter."""
        if self.over:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def stop(self) -> None:
        """Take nothing more (the face has what it needs, or the response ended)."""
        self.over = True
        self.wake()

    def fail(self, fault: Fault, detail: str) -> None:
        if not self.over:
            self.failed(fault, detail)
            self.stop()

    def close(self) -> None:
        """Close the connection; nothing more is taken or recorded."""
        self.over = True
        if self._timer is not None:
            self._timer.cancel()
        if self._transport is not None:
            self._transport.abort()

    def _watch(self) -> None:
        """The read timeout: fires once per timeout and re-arms from the last byte's time."""
        if self.over or self.read_timeout_s is None:
            return
        quiet = time.perf_counter() - self.last_byte
        if quiet >= self.read_timeout_s:
            self.fail("timeout", "")
        else:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.read_timeout_s - quiet, self._watch)

    # -- asyncio and httptools -----------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.over:
            return
        self.last_byte = time.perf_counter()
        try:
            self._take(data)
        except Exception as exc:  # the face's own fault: the request's outcome, not the loop's
            self._unrecorded(exc)

    def _take(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # raised by the face's `head`
            self._unrecorded(exc.__context__ or exc)
            return
        except httptools.HttpParserError as exc:
            if self.pieces:  # the body parsed before the fault still counts
                self.received()
            self.fail("invalid", str(exc))
            return
        if self.pieces:
            self.received()
        if self._complete:
            self._end()

    def _unrecorded(self, exc: BaseException) -> None:
        """An exception in the face's callbacks ends the response as a fault: raised in a
        protocol callback it would reach the loop, which prints "Fatal error on transport"
        with a traceback and closes the connection."""
        self.pieces.clear()
        self.fail("recording", f"{type(exc).__name__}: {exc}")

    def _end(self) -> None:
        if not self.over:
            self.ended()
            self.stop()

    def eof_received(self) -> bool:
        self.connection_lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.over:
            return
        try:
            if self.status is not None and not self._framed:
                self._end()  # the body ran to the end of the connection
            else:
                self.fail("closed", f": {exc}" if exc is not None else "")
        except Exception as error:  # the face's own fault, as in `data_received`
            self._unrecorded(error)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))
        lower = name.lower()
        if lower == b"content-length" or lower == b"transfer-encoding":
            self._framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.head()

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        self._complete = True
