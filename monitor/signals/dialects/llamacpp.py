"""llama.cpp server's dialect: the `llamacpp:` families it serves with `--metrics`.

Requests processing (busy slots) and deferred (waiting for a slot) are gauges. Its token
counters count a slot's prompt when it is processed and its generated tokens when it
finishes; `llamacpp:n_decode_total` counts llama_decode() calls, each of which moves every
busy slot forward, so it is the live progress signal. llama.cpp never preempts a slot, and
decode calls happen only with work to decode, so neither preemptions nor a scheduler
stepping without output can be seen. The KV cache usage gauge is read where a release
serves it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from stallkit.contract import names
from stallkit.monitor.signals.dialects.base import Dialect, Series, Signal


class Llamacpp(Dialect):
    """llama.cpp's `llama-server --metrics`."""

    name = "llamacpp"
    engine = "llama.cpp server"
    absent_is_zero = False  # it declares every family from the start (its KV gauge: older releases)
    prefixes = (names.LLAMACPP_PREFIX,)
    lacks: ClassVar[Mapping[Signal, str]] = {
        "preemptions": "no preemption counter (a slot is never preempted)",
        "steps": "no step counter (llama_decode() calls happen only with tokens to decode)",
    }
    series = (
        Series(names.LLAMACPP_REQUESTS_PROCESSING, "running"),
        Series(names.LLAMACPP_REQUESTS_DEFERRED, "waiting"),
        Series(names.LLAMACPP_KV_CACHE_USAGE, "kv_usage"),
        Series(names.LLAMACPP_TOKENS_PREDICTED, "gen_tokens", "counter"),
        Series(names.LLAMACPP_PROMPT_TOKENS, "prompt_tokens", "counter"),
        Series(names.LLAMACPP_N_DECODE, "forward_progress", "counter"),
    )
