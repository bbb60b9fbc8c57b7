"""The probes of `kit engine calibrate` sent to an engine over HTTP, and their timings.

Prompts are random token ids (distinct per request, so the prefix cache never hits), sent as
streaming `/v1/completions` with `ignore_eos` and usage on every chunk. A prefill's time is
the engine's own `vllm:request_prefill_time_seconds` (scheduled to first token, read from
`/metrics` around the request); a decode batch's step is the engine's mean
`vllm:inter_token_latency_seconds` over the batch. Both are stamped by the engine core, so the
API server's batching of stream chunks does not blur them. Where the engine serves neither,
the client's time to first token and the streams' seconds per token while all requests decode
stand in. Probes run round-robin `repeats` times; each one's median is its sample.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from stallkit.contract import names
from stallkit.engine import CostSample, EngineError, vllm_sizes
from stallkit.kits.calibrate.probes import (
    CalibrateOptions,
    DecodeProbe,
    EngineSizes,
    PrefillProbe,
    StreamPoint,
    decode_sample,
    prefill_sample,
)

__all__ = ["Measured", "engine_sizes", "run_probes"]

Progress = Callable[[str], None]
PREFILL_TIME = names.REQUEST_PREFILL_TIME
INTER_TOKEN_LATENCY = names.INTER_TOKEN_LATENCY
#: vLLM's OpenAI server's per-step budget and running slots when its flags do not say
DEFAULT_BATCHED_TOKENS = 2048
DEFAULT_NUM_SEQS = 128
#: the warm-up request's prompt (the first request pays for set-up)
WARMUP_TOKENS = 16
#: how long a finished prefill may take to appear on /metrics (it is recorded after the
#: response's last chunk is handed over)
METRIC_WAIT_S = 2.0


def engine_sizes(url: str, engine_args: Sequence[str], options: CalibrateOptions) -> EngineSizes:
    """The engine's sizes: asked of the engine where it says, else from its flags."""
    with httpx.Client(base_url=url, timeout=10.0) as client:
        try:
            card = client.get("/v1/models").raise_for_status().json()["data"][0]
            metrics = client.get("/metrics").text
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise EngineError(f"{url} did not say what it serves ({exc})", "is it vLLM?") from None
    cache = _cache_info(metrics)
    blocks = (
        int(cache.get("num_gpu_blocks", "0") or 0)
        if cache.get("num_gpu_blocks", "None").isdigit()
        else 0
    )
    flags = vllm_sizes(engine_args)  # the twin reads the same flags the same way
    return EngineSizes(
        max_model_len=int(card.get("max_model_len") or flags.get("max_model_len") or 2048),
        max_num_seqs=int(flags.get("max_num_seqs") or DEFAULT_NUM_SEQS),
        max_num_batched_tokens=options.max_num_batched_tokens
        or int(flags.get("max_num_batched_tokens") or DEFAULT_BATCHED_TOKENS),
        block_size=int(cache.get("block_size") or flags.get("block_size") or 16),
        pool_blocks=blocks - 1 if blocks > 1 else None,  # vLLM keeps one block as its null block
    )


def _cache_info(metrics: str) -> dict[str, str]:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics):
        if family.name == names.CACHE_CONFIG_INFO and family.samples:
            return dict(family.samples[0].labels)
    return {}


def _histogram(metrics: str, name: str) -> tuple[float, float] | None:
    from prometheus_client.parser import text_string_to_metric_families

    total = count = 0.0
    found = False
    for family in text_string_to_metric_families(metrics):
        if family.name != name:
            continue
        for sample in family.samples:
            found = True
            if sample.name == f"{name}_sum":
                total += sample.value
            elif sample.name == f"{name}_count":
                count += sample.value
    return (total, count) if found else None


@dataclass
class Measured:
    """What the probes measured: every repetition, then one median sample per probe."""

    #: label -> the repetitions' samples, in order
    runs: dict[str, list[CostSample]] = field(default_factory=dict)
    #: how samples were timed: "engine" (its histograms on /metrics) or "client" (the streams)
    timing: set[str] = field(default_factory=set)
    samples: list[CostSample] = field(default_factory=list)
    #: probes that gave no sample (a decode batch that never ran all at once)
    skipped: list[str] = field(default_factory=list)

    def add(self, sample: CostSample, how: str) -> None:
        self.runs.setdefault(sample.label, []).append(sample)
        self.timing.add(how)

    def finish(self, labels: Sequence[str]) -> None:
        """Each probe's sample: its first repetition's features, the median of its times."""
        self.samples = [
            runs[0].model_copy(update={"seconds": statistics.median(s.seconds for s in runs)})
            for runs in self.runs.values()
        ]
        self.skipped = [label for label in labels if label not in self.runs]

    def spread(self, label: str) -> float:
        """A probe's interquartile range over its median (the full range below 4 repetitions):
        a shared machine's outliers widen the full range, not the median it is fitted on."""
        values = sorted(s.seconds for s in self.runs[label])
        middle = statistics.median(values)
        if len(values) < 4:
            return (values[-1] - values[0]) / middle
        low, _, high = statistics.quantiles(values, n=4)
        return (high - low) / middle


class _Prober:
    """Sends probes to one engine; one instance per measurement."""

    def __init__(
        self, client: httpx.AsyncClient, model: str, vocab: int, budget: int, seed: int
    ) -> None:
        self.client, self.model, self.vocab, self.budget = client, model, vocab, budget
        self.rng = random.Random(seed)

    def prompt(self, tokens: int) -> list[int]:
        # ids 0-2 are the tiny model's bos, eos and pad: random text never needs them
        return [self.rng.randrange(3, self.vocab) for _ in range(tokens)]

    async def stream(self, prompt_tokens: int, max_tokens: int) -> tuple[float, list[StreamPoint]]:
        """One streamed request: when it was sent, and its chunks."""
        body = {
            "model": self.model,
            "prompt": self.prompt(prompt_tokens),
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        points: list[StreamPoint] = []
        sent = time.perf_counter()
        async with self.client.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")[:200]
                raise EngineError(
                    f"the engine refused a probe: HTTP {response.status_code} {text}",
                    "check the engine's sizes (--max-num-batched-tokens, --vocab-size)",
                )
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("choices") and chunk.get("usage"):
                    points.append(
                        StreamPoint(time.perf_counter(), chunk["usage"]["completion_tokens"])
                    )
        if not points or points[-1].tokens != max_tokens:
            raise EngineError(
                f"a probe of {max_tokens} tokens streamed {points[-1].tokens if points else 0}",
                "is it a vLLM engine (ignore_eos, continuous usage stats)?",
            )
        return sent, points

    async def histogram(self, name: str) -> tuple[float, float] | None:
        return _histogram((await self.client.get("/metrics")).text, name)

    async def settled(
        self, name: str, before: tuple[float, float], count: int
    ) -> tuple[float, float] | None:
        """A histogram's (sum, count) once it holds `count` observations more than `before`;
        None when it gained more (another client) or did not get there in time."""
        deadline = time.perf_counter() + METRIC_WAIT_S
        while time.perf_counter() < deadline:
            after = await self.histogram(name)
            if after is not None and after[1] >= before[1] + count:
                return after if after[1] == before[1] + count else None
            await asyncio.sleep(0.01)
        return None

    async def prefill(self, probe: PrefillProbe) -> tuple[CostSample, str]:
        """One prefill: the engine's scheduled-to-first-token time, else the client's TTFT."""
        before = await self.histogram(PREFILL_TIME)
        sent, points = await self.stream(probe.prompt_tokens, 1)
        after = await self.settled(PREFILL_TIME, before, 1) if before else None
        took_s = after[0] - before[0] if after and before else None
        how = "engine" if took_s is not None else "client"
        took_s = took_s if took_s is not None else points[0].at_s - sent
        return prefill_sample(probe, self.budget, took_s), how

    async def decode(self, probe: DecodeProbe) -> tuple[CostSample | None, str]:
        """One decode batch: the engine's mean inter-token latency over the batch, else the
        streams' seconds per token while all of them decode. The mean counts the batch's first
        steps too, which may hold the later requests' prefills: on the tiny CPU model that
        moved it by 2-5 % against the steps after the last prefill (too few to time there
        alone: the engine finishes before /metrics is read twice)."""
        before = await self.histogram(INTER_TOKEN_LATENCY)
        runs = [self.stream(probe.prompt_tokens, probe.decode_tokens) for _ in range(probe.batch)]
        streams = [points for _, points in await asyncio.gather(*runs)]
        gaps = probe.batch * (probe.decode_tokens - 1)
        end = await self.settled(INTER_TOKEN_LATENCY, before, gaps) if before else None
        if end is None or before is None:
            return decode_sample(probe, streams), "client"
        step_s = (end[0] - before[0]) / gaps
        # token k (2..decode_tokens) is made attending over the prompt and k - 1 tokens
        context = round(probe.prompt_tokens + probe.decode_tokens / 2)
        return CostSample.of([], [context] * probe.batch, step_s, probe.label), "engine"


async def run_probes(
    url: str,
    model: str,
    vocab: int,
    sizes: EngineSizes,
    prefills: Sequence[PrefillProbe],
    decodes: Sequence[DecodeProbe],
    options: CalibrateOptions,
    progress: Progress,
) -> Measured:
    """Send every probe `options.repeats` times, round-robin (slow drift on a shared machine
    is spread over all probes, not loaded onto one); each probe's median is its sample."""
    timeout = httpx.Timeout(options.request_timeout_s, connect=10.0)
    limits = httpx.Limits(max_connections=max(8, options.max_batch * 2))
    measured = Measured()
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        prober = _Prober(client, model, vocab, sizes.max_num_batched_tokens, options.seed)
        await prober.stream(WARMUP_TOKENS, 2)
        for rep in range(options.repeats):
            progress(
                f"repetition {rep + 1} of {options.repeats}: "
                f"{len(prefills)} prefills, {len(decodes)} decode batches"
            )
            for probe in prefills:
                sample, how = await prober.prefill(probe)
                measured.add(sample, how)
            for dprobe in decodes:
                got, how = await prober.decode(dprobe)
                if got is not None:
                    measured.add(got, how)
    measured.finish([p.label for p in prefills] + [p.label for p in decodes])
    return measured
