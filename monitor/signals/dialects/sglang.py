"""SGLang's dialect: the `sglang:` families of its scheduler and tokenizer manager.

Running and queued requests and the token usage are the scheduler's gauges. Its prompt and
generation token counters count a request when it finishes; newer releases also count the
tokens the scheduler processes as it runs (`sglang:realtime_tokens_total`, mode `decode`),
which is the live progress signal (without it, a request generating for longer than
stall_after reads as quiet: set stall_after above the longest request). Retracted requests
(SGLang's preemption) are counted in newer releases. There is no scheduler step counter:
its forward-pass counters move only with output, so a scheduler stepping over a request it
cannot admit, or spinning, is not visible on the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from stallkit.contract import names
from stallkit.monitor.signals.dialects.base import Dialect, Series, Signal


class Sglang(Dialect):
    """SGLang (`--enable-metrics`)."""

    name = "sglang"
    engine = "SGLang"
    prefixes = (names.SGLANG_PREFIX,)
    engine_label = "dp_rank"
    lacks: ClassVar[Mapping[Signal, str]] = {
        "steps": "no scheduler step counter (its forward-pass counters move only with output)"
    }
    series = (
        Series(names.SGLANG_NUM_RUNNING_REQS, "running"),
        Series(names.SGLANG_NUM_QUEUE_REQS, "waiting"),
        Series(names.SGLANG_TOKEN_USAGE, "kv_usage"),
        Series(names.SGLANG_GENERATION_TOKENS, "gen_tokens", "counter"),
        Series(names.SGLANG_PROMPT_TOKENS, "prompt_tokens", "counter"),
        Series(names.SGLANG_RETRACTED_REQUESTS, "preemptions", "counter"),
        Series(
            names.SGLANG_REALTIME_TOKENS, "forward_progress", "counter", only=("mode", "decode")
        ),
    )
