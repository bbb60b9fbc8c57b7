"""Metric dialects: each engine's documented page read into the monitor's signals, a page
told apart by its families, `--dialect` names, and the kinds an engine cannot show."""

from __future__ import annotations

from pathlib import Path

import pytest

from stallkit.contract.timeline import STALL_KINDS
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.signals.dialects import DIALECTS, detect_dialect, dialect_named
from stallkit.monitor.signals.parse import parse_metrics, sample_names, snapshot_from_samples

#: as SGLang's production-metrics documentation shows its page (scheduler and tokenizer)
SGLANG_PAGE = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.128902e+06
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.557572e+06
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
# HELP sglang:cache_hit_rate The cache hit rate
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.007507552643049313
# HELP sglang:num_running_reqs The number of running requests
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 28.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP sglang:num_retracted_requests_total Total number of retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP sglang:realtime_tokens_total Total number of tokens processed.
# TYPE sglang:realtime_tokens_total counter
sglang:realtime_tokens_total{mode="prefill_compute",model_name="m"} 900.0
sglang:realtime_tokens_total{mode="prefill_cache",model_name="m"} 100.0
sglang:realtime_tokens_total{mode="decode",model_name="m"} 7.6e+06
"""

#: as llama.cpp's server README lists its `--metrics` page
LLAMACPP_PAGE = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 2903.63
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3469
# HELP llamacpp:tokens_predicted_seconds_total Predict process time
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 3544.27
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 4012
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode counter
llamacpp:n_busy_slots_per_decode 1.5
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 2.37151
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.42
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
"""

#: TGI's router page (metrics-exporter-prometheus: counters without `_total`, histograms
#: without buckets as summaries)
TGI_PAGE = """\
# TYPE tgi_request_count counter
tgi_request_count 41
# TYPE tgi_queue_size gauge
tgi_queue_size 4
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 8
# TYPE tgi_batch_inference_success counter
tgi_batch_inference_success{method="prefill"} 40
tgi_batch_inference_success{method="decode"} 5120
# TYPE tgi_batch_inference_count counter
tgi_batch_inference_count{method="prefill"} 40
tgi_batch_inference_count{method="decode"} 5121
# TYPE tgi_request_generated_tokens summary
tgi_request_generated_tokens{quantile="0.5"} 200
tgi_request_generated_tokens_sum 6600
tgi_request_generated_tokens_count 33
"""


def test_sglang_page_reads_its_gauges_finished_counters_and_live_decode_tokens() -> None:
    snap = parse_metrics(SGLANG_PAGE)
    assert (snap.running, snap.waiting, snap.kv_usage) == (28, 7, 0.28)
    assert (snap.gen_tokens, snap.prompt_tokens) == (7.557572e6, 8.128902e6)
    assert snap.preemptions == 3.0 and snap.forward_progress == 7.6e6  # decode mode only
    assert snap.iterations is None and snap.steps is None and snap.prefix_queries is None
    assert snap.has_engine_series


def test_llamacpp_page_reads_slots_tokens_and_decode_calls() -> None:
    snap = parse_metrics(LLAMACPP_PAGE)
    assert (snap.running, snap.waiting, snap.kv_usage) == (2, 1, 0.42)
    assert (snap.gen_tokens, snap.prompt_tokens, snap.forward_progress) == (3469, 6886, 4012)
    assert snap.preemptions is None and snap.iterations is None


def test_tgi_page_reads_queue_batch_and_successful_forward_passes() -> None:
    snap = parse_metrics(TGI_PAGE)
    assert (snap.running, snap.waiting) == (8, 4)
    assert snap.forward_progress == 5160 and snap.gen_tokens == 6600
    assert snap.preemptions is None and snap.kv_usage is None


def test_a_tgi_router_before_its_first_request_reads_idle_not_blank() -> None:
    # its exporter declares a family only once used: recognised, the missing read 0
    snap = parse_metrics(
        "# TYPE tgi_batch_max_total_tokens gauge\ntgi_batch_max_total_tokens 16000\n"
    )
    assert snap.has_engine_series and (snap.running, snap.waiting, snap.forward_progress) == (
        0,
        0,
        0,
    )


@pytest.mark.parametrize(
    ("page", "name"),
    [(SGLANG_PAGE, "sglang"), (LLAMACPP_PAGE, "llamacpp"), (TGI_PAGE, "tgi")],
)
def test_a_page_is_told_apart_by_its_families(page: str, name: str) -> None:
    dialect = detect_dialect(page)
    assert dialect is not None and dialect.name == name
    assert detect_dialect("# HELP up x\nup 1\n") is None


def test_a_page_read_in_another_dialect_carries_no_engine_series() -> None:
    assert not parse_metrics(LLAMACPP_PAGE, dialect_named("vllm")).has_engine_series
    assert not parse_metrics(SGLANG_PAGE, dialect_named("tgi")).has_engine_series


def test_unknown_dialect_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(MonitorError) as info:
        dialect_named("ollama")
    assert "ollama" in str(info.value) and "sglang" in (info.value.hint or "")
    assert dialect_named(" TGI ").name == "tgi"


def test_prometheus_samples_of_each_dialect_make_the_same_snapshot_as_its_page() -> None:
    for page in (SGLANG_PAGE, LLAMACPP_PAGE, TGI_PAGE):
        from prometheus_client.parser import text_string_to_metric_families

        samples = [
            (s.name, s.labels, s.value)
            for f in text_string_to_metric_families(page)
            for s in f.samples
            if s.name in sample_names()
        ]
        assert snapshot_from_samples(samples) == parse_metrics(page)


def test_each_engine_says_which_kinds_it_cannot_show_and_why() -> None:
    unavailable = {d.name: d.unavailable() for d in DIALECTS}
    assert unavailable["vllm"] == {}
    assert sorted(unavailable["sglang"]) == ["blocked", "spinning"]
    assert sorted(unavailable["llamacpp"]) == ["blocked", "spinning", "thrashing"]
    assert sorted(unavailable["tgi"]) == ["blocked", "spinning", "thrashing"]
    assert "preemption" in unavailable["llamacpp"]["thrashing"]
    for d in DIALECTS:
        assert set(d.unavailable()) <= set(STALL_KINDS)


@pytest.mark.parametrize("name", ["sglang", "llamacpp", "tgi"])
def test_the_simulator_speaks_each_dialect_with_its_engines_semantics(name: str) -> None:
    from stallkit.engine.serve.metrics import SimMetrics
    from stallkit.engine.sim.config import SimConfig
    from stallkit.engine.sim.core import SimEngine

    config = SimConfig()
    engine, metrics = SimEngine(config), SimMetrics(config, 10.0, dialect=name)  # type: ignore[arg-type]
    for n in range(3):
        engine.add_request(f"r{n}", ["word"] * 64, 400, now_s=0.0)
        metrics.on_added(f"r{n}", 0.0, 400)
    now = 0.0
    for _ in range(40):
        now += engine.step(now).duration_s
    page = metrics.render(engine.stats, now).decode()
    dialect = detect_dialect(page)
    assert dialect is not None and dialect.name == name
    snap = parse_metrics(page)
    stats = engine.stats
    assert (snap.running, snap.waiting) == (stats.num_running, stats.num_waiting)
    assert snap.gen_tokens == 0  # counted when a request finishes: none has yet
    assert snap.forward_progress is not None and snap.forward_progress > 0  # live
    assert snap.sim_clock is not None and snap.sim_clock.engine_s == now


REAL_PAGES = Path(__file__).parents[2] / "data"


def test_llama_cpp_servers_real_page_reads_into_the_expected_signals() -> None:
    # saved from llama.cpp's server (--metrics, two slots) with both slots generating: its
    # generated-token counter still reads 0 (a slot counts its tokens when it finishes);
    # the decode calls are what move
    page = (REAL_PAGES / "llamacpp-metrics.txt").read_text()
    dialect = detect_dialect(page)
    assert dialect is not None and dialect.name == "llamacpp"
    snap = parse_metrics(page)
    assert (snap.running, snap.waiting) == (2, 0)
    assert (snap.gen_tokens, snap.prompt_tokens, snap.forward_progress) == (0, 1072, 1985)
    assert snap.kv_usage is None and snap.preemptions is None and snap.iterations is None
    assert snap.has_engine_series
    idle = parse_metrics((REAL_PAGES / "llamacpp-metrics-idle.txt").read_text())
    assert idle.has_engine_series and (idle.running, idle.waiting, idle.forward_progress) == (
        0,
        0,
        0,
    )
