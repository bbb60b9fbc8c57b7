"""The worker a release's environment runs: `python -m stallkit.engine.twin.release.worker`.

It reads jobs from its standard input and writes results to what was its standard output,
each a length-prefixed pickle: a job is `(fn, args)`, a result `("ok", value)` or
`("error", exception)`; end of input ends the worker. Its own standard output goes to its
standard error before any job runs, so a library's print cannot corrupt a result. A job sees
Ctrl-C as KeyboardInterrupt, as a job in a pool worker does; Ctrl-C to an idle worker does not
end it (the caller ends it by closing its input) but refuses every later job, so a job handed
over as the caller was interrupted does not run. Arguments: the release the environment
holds (checked against the vLLM it imports) and, optionally, a source tree whose `vllm/`
modules come first (the arm's overlay).
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
from typing import IO, Any

__all__ = ["main", "read_frame", "write_frame"]

_LENGTH = struct.Struct("!Q")


class _Interrupts:
    """Ctrl-C while no job runs: remembered, so later jobs end as interrupted at once."""

    seen = False

    @classmethod
    def idle(cls, signum: int, frame: object) -> None:
        cls.seen = True


def write_frame(stream: IO[bytes], value: Any) -> None:
    """One value, pickled and length-prefixed."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> tuple[bool, Any]:
    """`(True, value)` for the next value, `(False, None)` at the end of the stream."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return False, None
    (size,) = _LENGTH.unpack(head)
    return True, pickle.loads(stream.read(size))


def _result(fn: Any, args: tuple[Any, ...]) -> tuple[str, Any]:
    if _Interrupts.seen:
        return "error", KeyboardInterrupt()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return "ok", fn(*args)
    except BaseException as exc:  # the caller re-raises it (KeyboardInterrupt included)
        try:
            pickle.dumps(exc)
        except Exception:
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        return "error", exc
    finally:
        signal.signal(signal.SIGINT, _Interrupts.idle)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, _Interrupts.idle)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints (vLLM's, a job's) go to standard error, never into a result
    from stallkit.engine.twin.build import quiet_vllm_logging
    from stallkit.engine.twin.overlay import install_overlay
    from stallkit.engine.twin.release.env import check_release_here

    try:
        quiet_vllm_logging()
        if len(argv) > 1 and argv[1]:
            install_overlay(argv[1])
        check_release_here(f"twin@{argv[0]}", argv[0])
    except Exception as exc:  # the caller raises it where the job would have
        write_frame(results, ("error", exc))
        return 1
    jobs = sys.stdin.buffer
    write_frame(results, ("ok", os.getpid()))  # ready
    while True:
        more, job = read_frame(jobs)
        if not more:
            return 0
        fn, args = job
        write_frame(results, _result(fn, args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
