"""The simulator's `/metrics` in another engine's metric dialect: SGLang, llama.cpp, TGI.

Pure: the engine's stats and what finished requests counted in, page text out. Each page
carries the families those engines serve for the signals a stall monitor reads, with their
semantics: SGLang's and llama.cpp's token counters and TGI's generated-tokens histogram
count a request when it finishes, while the live progress is SGLang's realtime decode
tokens, llama.cpp's decode calls and TGI's successful forward passes (here: the engine's
steps that scheduled work). None of them counts a step that schedules nothing; llama.cpp
and TGI count no preemption. A core that died behind its server (fault `dead_core`) leaves
only the simulator's clock on the page. Labels and `_total` suffixes are each engine's own
(TGI's exporter writes none).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from stallkit.contract import names
from stallkit.engine.core.records import EngineStats

#: (engine seconds, time scale) of the simulator's clock
SimClockPair = tuple[float, float]


@dataclass
class FinishedCounts:
    """What finished requests counted: requests, their prompt and generated tokens."""

    requests: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0

    def add(self, prompt_tokens: int, output_tokens: int) -> None:
        """Count one finished request."""
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.output_tokens += output_tokens


#: (name, type, help, [(sample suffix and labels, value)]); counters named as their
#: samples (with `_total`, as both engines' pages declare them)
_Family = tuple[str, str, str, list[tuple[str, float]]]


def _text(families: Iterable[_Family]) -> bytes:
    lines: list[str] = []
    for name, kind, doc, samples in families:
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{labels} {float(value)!r}" for labels, value in samples]
    return ("\n".join(lines) + "\n").encode()


def _clock(clock: SimClockPair, labels: str) -> list[_Family]:
    engine_s, scale = clock
    return [
        (names.SIM_ENGINE_TIME, "gauge", "Simulator only: engine seconds since start.",
         [(labels, engine_s)]),
        (names.SIM_TIME_SCALE, "gauge", "Simulator only: engine seconds per wall second.",
         [(labels, scale)]),
    ]  # fmt: skip


def sglang_page(stats: EngineStats, done: FinishedCounts, clock: SimClockPair, model: str) -> bytes:
    """SGLang's scheduler and tokenizer-manager families."""
    lab = f'{{model_name="{model}"}}'

    def mode(name: str) -> str:
        return f'{{model_name="{model}",mode="{name}"}}'

    engine: list[_Family] = [
        (names.SGLANG_NUM_RUNNING_REQS, "gauge", "The number of running requests.",
         [(lab, stats.num_running)]),
        (names.SGLANG_NUM_QUEUE_REQS, "gauge", "The number of requests in the waiting queue.",
         [(lab, stats.num_waiting)]),
        (names.SGLANG_TOKEN_USAGE, "gauge", "The token usage.", [(lab, stats.kv_usage)]),
        (names.SGLANG_PROMPT_TOKENS, "counter",
         "Number of prefill tokens processed.", [(lab, done.prompt_tokens)]),
        (names.SGLANG_GENERATION_TOKENS, "counter",
         "Number of generation tokens processed.", [(lab, done.output_tokens)]),
        (names.SGLANG_RETRACTED_REQUESTS, "counter",
         "Total number of retracted requests.", [(lab, stats.num_preemptions)]),
        (names.SGLANG_REALTIME_TOKENS, "counter",
         "Total number of tokens processed (updated on each log interval).",
         [(mode("prefill_compute"), stats.prompt_tokens - stats.prompt_tokens_cached),
          (mode("prefill_cache"), stats.prompt_tokens_cached),
          (mode("decode"), stats.generation_tokens)]),
    ]  # fmt: skip
    return _page(stats, engine, _clock(clock, lab))


def llamacpp_page(
    stats: EngineStats, done: FinishedCounts, clock: SimClockPair, model: str
) -> bytes:
    """llama.cpp server's `--metrics` families (no labels)."""
    engine: list[_Family] = [
        (names.LLAMACPP_PROMPT_TOKENS, "counter",
         "Number of prompt tokens processed.", [("", stats.prompt_tokens)]),
        (names.LLAMACPP_TOKENS_PREDICTED, "counter",
         "Number of generation tokens processed.", [("", done.output_tokens)]),
        (names.LLAMACPP_N_DECODE, "counter",
         "Total number of llama_decode() calls", [("", stats.steps - stats.empty_steps)]),
        (names.LLAMACPP_REQUESTS_PROCESSING, "gauge", "Number of requests processing.",
         [("", stats.num_running)]),
        (names.LLAMACPP_REQUESTS_DEFERRED, "gauge", "Number of requests deferred.",
         [("", stats.num_waiting)]),
    ]  # fmt: skip
    return _page(stats, engine, _clock(clock, ""))


def tgi_page(stats: EngineStats, done: FinishedCounts, clock: SimClockPair, model: str) -> bytes:
    """TGI router's families (counters without `_total`, as its exporter writes them)."""
    decode = '{method="decode"}'
    engine: list[_Family] = [
        (names.TGI_QUEUE_SIZE, "gauge", "Current queue size", [("", stats.num_waiting)]),
        (names.TGI_BATCH_CURRENT_SIZE, "gauge", "Current batch size", [("", stats.num_running)]),
        (names.TGI_BATCH_INFERENCE_SUCCESS, "counter",
         "Number of successful inference calls per method (prefill or decode)",
         [(decode, stats.steps - stats.empty_steps)]),
        (names.TGI_REQUEST_GENERATED_TOKENS, "summary", "Generated tokens per request",
         [("_sum", done.output_tokens), ("_count", done.requests)]),
    ]  # fmt: skip
    return _page(stats, engine, _clock(clock, ""))


def _page(stats: EngineStats, engine: list[_Family], clock: list[_Family]) -> bytes:
    """The page: the engine's families while its core lives, then the simulator's clock."""
    return _text([*(engine if stats.core_alive else []), *clock])


#: The pages of the dialects the simulator speaks besides vLLM's (its default page).
DIALECT_PAGES: dict[str, Callable[[EngineStats, FinishedCounts, SimClockPair, str], bytes]] = {
    "sglang": sglang_page,
    "llamacpp": llamacpp_page,
    "tgi": tgi_page,
}
