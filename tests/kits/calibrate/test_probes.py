"""The calibration's probes: what is sent for an engine's sizes, and how timings become samples."""

from __future__ import annotations

import math
import statistics

import pytest

from stallkit.engine.sim.config import CostModel
from stallkit.engine.twin.calibration import step_features
from stallkit.kits.calibrate.prober import Measured
from stallkit.kits.calibrate.probes import (
    DecodeProbe,
    EngineSizes,
    PrefillProbe,
    StreamPoint,
    decode_rates,
    decode_sample,
    plan_probes,
    prefill_chunks,
    prefill_sample,
)

#: the cpu-patched kit: 256 tokens, 2 seqs, budget 256, 8 usable blocks of 32
PATCHED = EngineSizes(256, 2, 256, 32, 8)
#: the cpu-smoke kit: 4096 tokens, 4 seqs, vLLM's default budget, 39 usable blocks of 128
SMOKE = EngineSizes(4096, 4, 2048, 128, 39)


@pytest.mark.parametrize("sizes", [PATCHED, SMOKE, EngineSizes(131072, 4, 8192, 896, None)])
def test_every_probe_fits_the_engine(sizes: EngineSizes) -> None:
    prefills, decodes = plan_probes(sizes, decode_tokens=32, max_batch=8)
    lengths = [p.prompt_tokens for p in prefills]
    assert len(lengths) >= 5 and lengths == sorted(set(lengths))
    assert max(lengths) < sizes.max_model_len
    assert sum(n <= sizes.max_num_batched_tokens for n in lengths) >= 5  # most in one step
    assert {d.batch for d in decodes} == {b for b in (1, 2, 4, 8) if b <= sizes.max_num_seqs}
    for probe in decodes:
        tokens = probe.prompt_tokens + probe.decode_tokens
        assert tokens < sizes.max_model_len
        if sizes.pool_blocks is not None:  # all the batch's blocks at once: nothing preempted
            assert probe.batch * math.ceil((tokens + 1) / sizes.block_size) <= sizes.pool_blocks
    assert len({d.prompt_tokens for d in decodes if d.batch == 1}) == 3


def test_longer_prompts_than_the_budget_are_probed_in_chunks() -> None:
    prefills, _ = plan_probes(SMOKE, decode_tokens=32, max_batch=4)
    assert [p.prompt_tokens for p in prefills if p.prompt_tokens > 2048] == [3072, 4095]
    assert prefill_chunks(4095, 2048) == [(2048, 0), (2047, 2048)]
    assert prefill_chunks(100, 2048) == [(100, 0)]
    sample = prefill_sample(PrefillProbe(4095), 2048, 0.5)
    first, second = step_features([(2048, 0)], []), step_features([(2047, 2048)], [])
    assert sample.features == pytest.approx([a + b for a, b in zip(first, second, strict=True)])
    assert sample.features[0] == 2  # two steps, two overheads
    assert (sample.seconds, sample.label) == (0.5, "prefill 4095")


def _stream(start: float, step: float, tokens: int, per_chunk: int = 1) -> list[StreamPoint]:
    return [
        StreamPoint(start + k * step, k)
        for k in range(1, tokens + 1)
        if k % per_chunk == 0 or k == 1
    ]


def test_a_decode_batch_is_timed_while_every_request_decodes() -> None:
    probe = DecodeProbe(batch=2, prompt_tokens=100, decode_tokens=40)
    # the second request's first token comes 3 steps late; steps take 5 ms
    streams = [_stream(0.0, 0.005, 40), _stream(0.015, 0.005, 40, per_chunk=4)]
    sample = decode_sample(probe, streams)
    assert sample is not None
    assert sample.seconds == pytest.approx(0.005)
    assert sample.features[:4] == (1.0, 0.0, 0.0, 2.0)
    assert 2 * 100 < sample.features[4] < 2 * 140
    assert sample.label == "decode 2x100"


def test_a_decode_batch_that_never_ran_together_gives_no_sample() -> None:
    probe = DecodeProbe(batch=2, prompt_tokens=100, decode_tokens=10)
    one_after_the_other = [_stream(0.0, 0.005, 10), _stream(1.0, 0.005, 10)]
    assert decode_sample(probe, one_after_the_other) is None
    assert decode_sample(probe, [_stream(0.0, 0.005, 10)]) is None


def test_repetitions_become_one_median_sample_each() -> None:
    measured = Measured()
    for seconds in (0.010, 0.012, 0.030):
        measured.add(prefill_sample(PrefillProbe(64), 256, seconds), "engine")
    measured.finish(["prefill 64", "decode 2x16"])
    assert [s.seconds for s in measured.samples] == [0.012]
    assert measured.spread("prefill 64") == pytest.approx((0.030 - 0.010) / 0.012)  # < 4: range
    for seconds in (0.011, 0.013, 0.100):  # six: the interquartile range, the outlier left out
        measured.add(prefill_sample(PrefillProbe(64), 256, seconds), "engine")
    low, _, high = statistics.quantiles([0.010, 0.011, 0.012, 0.013, 0.030, 0.100], n=4)
    assert measured.spread("prefill 64") == pytest.approx((high - low) / 0.0125)
    assert measured.skipped == ["decode 2x16"]
    assert measured.timing == {"engine"}


def test_decode_rates_are_sequences_over_the_step_time() -> None:
    cost = CostModel(step_overhead_s=0.004, decode_per_seq_s=0.001, decode_per_context_token_s=0)
    rates = decode_rates(cost, [1, 4], 1000)
    assert [n for n, _ in rates] == [1, 4]
    assert [rate for _, rate in rates] == pytest.approx([200, 500])
