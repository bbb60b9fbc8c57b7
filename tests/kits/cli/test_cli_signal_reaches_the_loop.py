"""SIGTERM and Ctrl-C landing inside a protocol callback of a running event loop (here a
stream's `data_received`, the frame a busy `kit load` is most often in): within every command's
signal handling the loop takes the signal between two callbacks, so it leaves `Runner.run`
as KeyboardInterrupt with the main task's cleanup done, and nothing reaches the loop's
exception handler (uvloop's "Fatal error on transport", printed with a traceback, after which
the signal was lost and the command ran on)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import cast

import pytest

from stallkit.kits.cli.common import sigterm_as_ctrl_c


class _SignalOnRead(asyncio.Protocol):
    """A client whose first read raises `sig` in this process, inside the callback."""

    def __init__(self, sig: signal.Signals) -> None:
        self.sig = sig
        self.reads = 0

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        if self.reads == 1:
            signal.raise_signal(self.sig)


class _Tokens(asyncio.Protocol):
    """A server that sends a few tokens as its client connects, then holds the connection."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.write(b"token " * 100)


async def _stream_until_stopped(sig: signal.Signals, cleaned: list[str]) -> None:
    loop = asyncio.get_running_loop()
    served: list[_Tokens] = []

    def serve() -> _Tokens:
        served.append(_Tokens())
        return served[-1]

    server = await loop.create_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, _ = await loop.create_connection(lambda: _SignalOnRead(sig), "127.0.0.1", port)
    try:
        await asyncio.sleep(60)  # the signal ends it long before
    finally:
        transport.abort()
        for tokens in served:
            tokens.transport.abort()
        server.close()
        cleaned.append("done")


def _factories() -> list[tuple[str, Callable[[], asyncio.AbstractEventLoop]]]:
    made: list[tuple[str, Callable[[], asyncio.AbstractEventLoop]]] = [
        ("asyncio", asyncio.new_event_loop)
    ]
    try:
        import uvloop
    except ImportError:
        return made
    return [*made, ("uvloop", uvloop.new_event_loop)]


@pytest.mark.parametrize(
    ("name", "factory"), _factories(), ids=lambda x: x if isinstance(x, str) else ""
)
@pytest.mark.parametrize(
    ("sig", "ignore_ctrl_c"),
    [(signal.SIGTERM, True), (signal.SIGTERM, False), (signal.SIGINT, False)],
    ids=["sigterm-background-job", "sigterm", "sigint"],
)
def test_a_signal_in_a_protocol_callback_stops_the_loop_between_callbacks(
    sig: signal.Signals,
    ignore_ctrl_c: bool,
    name: str,
    factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    reported: list[str] = []
    cleaned: list[str] = []

    def loop_factory() -> asyncio.AbstractEventLoop:
        loop = factory()
        loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
        return loop

    ctrl_c = signal.signal(
        signal.SIGINT, signal.SIG_IGN if ignore_ctrl_c else signal.default_int_handler
    )
    try:
        with (
            sigterm_as_ctrl_c(),
            pytest.raises(KeyboardInterrupt),
            asyncio.Runner(loop_factory=loop_factory) as runner,
        ):
            runner.run(_stream_until_stopped(sig, cleaned))
    finally:
        signal.signal(signal.SIGINT, ctrl_c)
    assert reported == [], name
    assert cleaned == ["done"]
