"""A lean asyncio network layer for httpx, so one process can keep thousands of streams fed.

A token stream arrives as one small socket read per token. With httpx's default backend each
read passes through anyio (a cancel scope per read for the timeout), which costs more than
parsing the token itself. This module plugs a plain asyncio ``Protocol`` under httpcore's
public network-backend interface (read with a ``call_later`` timeout, buffered writes with flow
control) and wraps the httpcore pool in a small httpx transport that translates httpcore's
exceptions into httpx's, so the client code above keeps using ordinary httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpcore
import httpx

_EXCEPTIONS: dict[type[Exception], type[httpx.TransportError]] = {
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.PoolTimeout: httpx.PoolTimeout,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
    httpcore.ProxyError: httpx.ProxyError,
    httpcore.NetworkError: httpx.NetworkError,
    httpcore.TimeoutException: httpx.TimeoutException,
}


@contextlib.contextmanager
def _mapped() -> Any:
    try:
        yield
    except Exception as exc:
        for source, target in _EXCEPTIONS.items():
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.eof = False
        self.error: Exception | None = None
        self.reader: asyncio.Future[None] | None = None
        self.drained: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof, self.error = True, exc
        self._wake()
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def pause_writing(self) -> None:
        self.drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        self.drained = None

    def _wake(self) -> None:
        if self.reader is not None and not self.reader.done():
            self.reader.set_result(None)


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport, self._protocol = transport, protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        proto = self._protocol
        if not proto.chunks and not proto.eof:
            loop = asyncio.get_running_loop()
            proto.reader = loop.create_future()
            timer = loop.call_later(timeout, _expire, proto.reader) if timeout else None
            try:
                await proto.reader
            except TimeoutError:
                raise httpcore.ReadTimeout("no data within the read timeout") from None
            finally:
                proto.reader = None
                if timer is not None:
                    timer.cancel()
        if proto.chunks:
            data = b"".join(proto.chunks) if len(proto.chunks) > 1 else proto.chunks[0]
            proto.chunks.clear()
            if len(data) > max_bytes:
                proto.chunks.append(data[max_bytes:])
                data = data[:max_bytes]
            return data
        if proto.error is not None:
            raise httpcore.ReadError(str(proto.error))
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self._protocol.eof:
            raise httpcore.WriteError("connection closed")
        self._transport.write(buffer)
        drained = self._protocol.drained
        if drained is not None:
            try:
                await asyncio.wait_for(asyncio.shield(drained), timeout)
            except TimeoutError:
                raise httpcore.WriteTimeout("write timed out") from None

    async def aclose(self) -> None:
        self._transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                tls = await loop.start_tls(
                    self._transport, self._protocol, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout("TLS handshake timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        assert isinstance(tls, asyncio.Transport)
        return _Stream(tls, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # data or EOF on an idle connection: do not reuse it
            return bool(self._protocol.chunks) or self._protocol.eof
        names = {"client_addr": "sockname", "server_addr": "peername"}
        return self._transport.get_extra_info(names.get(info, info))


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore network backend on plain asyncio transports."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol, host, port, local_addr=local
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connect to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option in socket_options or ():
                sock.setsockopt(*option)
        return _Stream(transport, protocol)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_unix_connection(_Protocol, path)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connect to {path} timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        return _Stream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _ResponseStream(httpx.AsyncByteStream):
    """The response body; closing it closes the request's own connection."""

    def __init__(self, stream: Any, connection: httpcore.AsyncHTTPConnection) -> None:
        self._stream, self._connection = stream, connection

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        try:
            with _mapped():
                await self._stream.aclose()
        finally:
            await self._connection.aclose()


class LeanTransport(httpx.AsyncBaseTransport):
    """An httpx transport that opens one connection per request on the asyncio backend.

    No pool: a load test's requests are long streams, so a fresh connection each costs little,
    and it avoids the pool's per-request scans over thousands of connections.
    """

    def __init__(self) -> None:
        self._backend = AsyncioBackend()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        url = request.url
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        connection = httpcore.AsyncHTTPConnection(
            origin=core.url.origin, network_backend=self._backend
        )
        try:
            with _mapped():
                response = await connection.handle_async_request(core)
        except BaseException:
            await connection.aclose()
            raise
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream, connection),
            extensions=response.extensions,
        )
