"""Hugging Face TGI's dialect: the router's `tgi_` families.

The queue size and the current batch size are gauges (waiting and running). TGI counts no
token while generating: tokens per request are observed when it finishes
(`tgi_request_generated_tokens`), and its live progress signal is the count of successful
forward passes (`tgi_batch_inference_success`, prefill and decode), each of which gives every
request in the batch its next token. Its exporter writes counters without `_total` and
declares a family when it is first used, so a family missing from a TGI page reads 0. There
is no preemption counter and no step counter apart from forward passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from stallkit.contract import names
from stallkit.monitor.signals.dialects.base import Dialect, Series, Signal


class Tgi(Dialect):
    """Text Generation Inference's router."""

    name = "tgi"
    engine = "TGI"
    prefixes = (names.TGI_PREFIX,)
    lacks: ClassVar[Mapping[Signal, str]] = {
        "preemptions": "no preemption counter",
        "steps": "no step counter (forward passes are counted only when they succeed)",
    }
    series = (
        Series(names.TGI_BATCH_CURRENT_SIZE, "running"),
        Series(names.TGI_QUEUE_SIZE, "waiting"),
        Series(names.TGI_REQUEST_GENERATED_TOKENS, "gen_tokens", "histogram_sum"),
        Series(names.TGI_BATCH_INFERENCE_SUCCESS, "forward_progress", "counter"),
    )
