"""The simulator's HTTP front against real clients: a live server on 127.0.0.1 port 0.

Streams are read as real SSE, /metrics is parsed with prometheus_client's parser, the process
entry point runs as a real subprocess, and `kit sim serve` runs through typer's runner.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from stallkit.contract.names import SIM_FORK_FAMILIES, SIM_VLLM_FAMILIES

pytestmark = pytest.mark.wallclock

GOLDEN = Path(__file__).parents[2] / "data" / "vllm-0.32-metric-families.txt"
MODEL = "stallkit-sim"
ONE_MESSAGE = b'"messages": [{"role": "user", "content": "x"}]'
#: Small blocks so short test prompts fill whole blocks (prefix-cache hits need full blocks).
SMALL = {"block_size": 16, "num_blocks": 512}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def chat_body(messages: list[dict[str, str]], max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "temperature": 0.7,
        **extra,
    }


async def stream_chat(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> tuple[str, list[dict[str, Any]]]:
    """POST a streaming chat; return the reply text and every JSON chunk (checks [DONE] ends it)."""
    chunks: list[dict[str, Any]] = []
    lines: list[str] = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        async for line in resp.aiter_lines():
            if line:
                lines.append(line)
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        assert line.startswith("data: ")
        chunks.append(json.loads(line.removeprefix("data: ")))
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    return text, chunks


async def scrape(client: httpx.AsyncClient) -> dict[str, Any]:
    resp = await client.get("/metrics")
    assert resp.status_code == 200
    return {f.name: f for f in text_string_to_metric_families(resp.text)}


def sample(families: dict[str, Any], family: str, **labels: str) -> float:
    for s in families[family].samples:
        if all(s.labels.get(k) == v for k, v in labels.items()) and not s.name.endswith("_created"):
            return float(s.value)
    raise AssertionError(f"no sample {family} {labels}")


async def gpu_util(client: httpx.AsyncClient) -> float:
    """The simulated GPUs' utilisation from /dcgm/metrics (all GPUs must agree)."""
    text = (await client.get("/dcgm/metrics")).text
    (family,) = [
        f for f in text_string_to_metric_families(text) if f.name == "DCGM_FI_DEV_GPU_UTIL"
    ]
    values = {s.value for s in family.samples}
    assert len(values) == 1
    return float(values.pop())


async def wait_metrics(
    client: httpx.AsyncClient, check: Any, attempts: int = 400
) -> dict[str, Any]:
    """Scrape until `check(families)` holds (the engine runs on its own clock)."""
    for _ in range(attempts):
        families = await scrape(client)
        if check(families):
            return families
        await asyncio.sleep(0.05)
    raise AssertionError("metrics never reached the expected state")


async def test_streaming_chat_usage_matches_tokenize(sim_server: Any) -> None:
    messages = [{"role": "system", "content": "be brief"}, user("tell me about " * 40)]
    async with sim_server(time_scale=50.0) as url, httpx.AsyncClient(base_url=url) as client:
        text, chunks = await stream_chat(client, chat_body(messages, max_tokens=37))
        tok = (await client.post("/tokenize", json={"model": MODEL, "messages": messages})).json()
        usage = chunks[-1]["usage"]
        assert chunks[-1]["choices"] == []
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert chunks[-2]["choices"][0]["finish_reason"] == "length"
        assert usage["prompt_tokens"] == tok["count"] == 2 + 2 + 3 * 40 + 1
        assert len(tok["tokens"]) == tok["count"]
        assert tok["max_model_len"] == 131072
        assert usage["completion_tokens"] == len(text.split()) == 37
        assert usage["total_tokens"] == usage["prompt_tokens"] + 37
        assert text.startswith(" ")
        # Non-streaming and the completions endpoint agree on the counting.
        plain = await client.post(
            "/v1/completions", json={"model": MODEL, "prompt": "one two three", "max_tokens": 4}
        )
        body = plain.json()
        assert body["usage"]["prompt_tokens"] == 3
        assert len(body["choices"][0]["text"].split()) == body["usage"]["completion_tokens"] == 4
        _, chunks = await stream_chat(client, {**chat_body(messages, 3), "stream_options": None})
        assert all("usage" not in c for c in chunks)
        models = (await client.get("/v1/models")).json()
        assert models["data"][0]["id"] == MODEL
        assert models["data"][0]["max_model_len"] == 131072


async def test_second_turn_is_served_from_prefix_cache(sim_server: Any) -> None:
    first = [user("alpha beta gamma delta " * 50)]
    async with (
        sim_server(time_scale=50.0, **SMALL) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        reply, chunks = await stream_chat(client, chat_body(first, max_tokens=20))
        assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        second = [*first, {"role": "assistant", "content": reply}, user("and then?")]
        _, chunks = await stream_chat(client, chat_body(second, max_tokens=5))
        usage = chunks[-1]["usage"]
        assert usage["prompt_tokens"] == 1 + 200 + 1 + 20 + 1 + 2 + 1
        assert usage["prompt_tokens_details"]["cached_tokens"] >= 200
        families = await scrape(client)
        assert sample(families, "vllm:prefix_cache_hits") >= 200


async def test_client_disconnect_aborts_the_request(sim_server: Any) -> None:
    async with (
        sim_server(time_scale=1.0, **SMALL) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        body = chat_body([user("keep talking " * 30)], max_tokens=3000)
        words = 0
        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            async for line in resp.aiter_lines():
                if '"content":" ' in line:
                    words += 1
                if words >= 3:
                    assert await gpu_util(client) > 0  # decoding: the simulated GPUs are busy
                    break  # leaving the block closes the connection mid-stream
        families = await wait_metrics(
            client,
            lambda f: (
                sample(f, "vllm:request_success", finished_reason="abort") == 1
                and sample(f, "vllm:num_requests_running") == 0
            ),
        )
        assert sample(families, "vllm:num_requests_waiting") == 0
        assert sample(families, "vllm:request_success", finished_reason="length") == 0
        # The engine is free again: a new request runs to completion.
        text, _ = await stream_chat(client, chat_body([user("short")], max_tokens=3))
        assert len(text.split()) == 3


async def test_metrics_serve_every_claimed_golden_family(sim_server: Any) -> None:
    golden = {line.split()[0] for line in GOLDEN.read_text().splitlines() if line.strip()}
    assert golden >= SIM_VLLM_FAMILIES
    async with sim_server(time_scale=50.0) as url, httpx.AsyncClient(base_url=url) as client:
        await stream_chat(client, chat_body([user("hi " * 30)], max_tokens=8))
        resp = await client.get("/metrics")
        assert resp.headers["content-type"].startswith("text/plain")
        families = list(text_string_to_metric_families(resp.text))
        served = {f.name + "_total" if f.type == "counter" else f.name for f in families}
        assert served >= SIM_VLLM_FAMILIES | SIM_FORK_FAMILIES
        for family in families:
            if family.name.startswith("vllm:"):
                for s in family.samples:
                    assert s.labels["model_name"] == MODEL and s.labels["engine"] == "0"
        by_name = {f.name: f for f in families}
        assert sample(by_name, "vllm:generation_tokens") == 8
        assert sample(by_name, "vllm:request_success", finished_reason="length") == 1
        assert sample(by_name, "vllm:num_requests_waiting_by_reason", reason="capacity") == 0
        assert sample(by_name, "vllm:num_requests_waiting_by_reason", reason="deferred") == 0
        assert sample(by_name, "vllm:scheduler_prefill_compute_share") == pytest.approx(0.4)
        assert sample(by_name, "vllm:scheduler_compute_seconds", **{"class": "decode"}) > 0
        ttft = [
            s
            for s in by_name["vllm:time_to_first_token_seconds"].samples
            if s.name.endswith("_count")
        ]
        assert ttft[0].value == 1
        dcgm = (await client.get("/dcgm/metrics")).text
        gpus = [f for f in text_string_to_metric_families(dcgm) if f.name == "DCGM_FI_DEV_GPU_UTIL"]
        assert sorted(s.labels["gpu"] for s in gpus[0].samples) == ["0", "1"]
        assert all(0 <= s.value <= 100 for s in gpus[0].samples)


@pytest.mark.parametrize(
    ("path", "payload", "status", "needle"),
    [
        ("/v1/chat/completions", b"{not json", 400, "JSON"),
        ("/v1/chat/completions", b"[1, 2]", 400, "object"),
        ("/v1/chat/completions", b'{"model": "stallkit-sim"}', 400, "messages"),
        ("/v1/chat/completions", b'{"model": "gpt-9", %s}' % ONE_MESSAGE, 400, "gpt-9"),
        ("/v1/chat/completions", b'{%s, "max_tokens": 0}' % ONE_MESSAGE, 400, "max_tokens"),
        ("/v1/completions", b'{"prompt": 42}', 400, "prompt"),
        ("/tokenize", b'{"messages": "nope"}', 400, "messages"),
        ("/v1/nothing-here", b"{}", 404, "Not Found"),
    ],
)  # fmt: skip
async def test_bad_requests_get_openai_errors(
    sim_server: Any, path: str, payload: bytes, status: int, needle: str
) -> None:
    async with sim_server(time_scale=50.0) as url, httpx.AsyncClient(base_url=url) as client:
        resp = await client.post(
            path, content=payload, headers={"content-type": "application/json"}
        )
        assert resp.status_code == status
        error = resp.json()["error"]
        assert needle in error["message"]
        assert error["code"] == status and error["type"] and "param" in error
        text, _ = await stream_chat(client, chat_body([user("still there?")], max_tokens=2))
        assert len(text.split()) == 2


async def test_prompt_longer_than_max_model_len_is_refused(sim_server: Any) -> None:
    async with (
        sim_server(time_scale=50.0, max_model_len=100) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        resp = await client.post("/v1/completions", json={"prompt": "w " * 150, "max_tokens": 5})
        assert resp.status_code == 400
        assert "maximum context length is 100" in resp.json()["error"]["message"]
        ok = await client.post("/v1/completions", json={"prompt": "w " * 50, "max_tokens": 5})
        assert ok.status_code == 200


async def test_freeze_stops_tokens_and_metrics_still_answer(sim_server: Any) -> None:
    async with (
        sim_server(time_scale=10.0, freeze_at_s=10.0, **SMALL) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        body = chat_body([user("go on " * 20)], max_tokens=5000)
        words = 0
        timeout = httpx.Timeout(5.0, read=1.5)
        with pytest.raises(httpx.ReadTimeout):
            async with client.stream(
                "POST", "/v1/chat/completions", json=body, timeout=timeout
            ) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: {"):
                        choices = json.loads(line[6:])["choices"]
                        words += len(choices[0]["delta"].get("content", "").split())
        assert 0 < words < 5000
        before = await scrape(client)
        await asyncio.sleep(0.3)
        after = await scrape(client)
        assert sample(after, "vllm:generation_tokens") == sample(before, "vllm:generation_tokens")
        assert sample(after, "vllm:generation_tokens") >= words
        assert sample(after, "vllm:num_requests_running") == 1
        assert sample(after, "vllm:prefix_cache_queries") == sample(
            before, "vllm:prefix_cache_queries"
        )
        assert await gpu_util(client) == 0  # frozen for longer than the utilisation window
        assert (await client.get("/health")).status_code == 200


async def test_fail_metrics_at_gives_503(sim_server: Any) -> None:
    async with (
        sim_server(time_scale=2.0, fail_metrics_at_s=2.0) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        statuses: list[int] = []
        for _ in range(500):
            statuses.append((await client.get("/metrics")).status_code)
            if statuses[-1] == 503:
                break
            await asyncio.sleep(0.02)
        assert statuses[0] == 200 and statuses[-1] == 503
        assert (await client.get("/metrics")).status_code == 503
        assert (await client.get("/health")).status_code == 200


def test_module_entry_point_prints_url_and_serves() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stallkit.engine.serve",
            "--policy",
            "fix",
            "--port",
            "0",
            "--time-scale",
            "5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "no URL line within 60 s"
        line = proc.stdout.readline()
        assert line.startswith("stallkit-sim listening on http://127.0.0.1:")
        url = line.split()[-1]
        assert httpx.get(f"{url}/health").status_code == 200
        assert httpx.get(f"{url}/version").json()["version"]
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert "policy=fix" in err
    assert "Traceback" not in err


def test_kit_sim_serve_rejects_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("num_blocks = 0\nblock_size = 16\n")
    result = _invoke_serve(["--config", str(bad)])
    assert result.exit_code == 2
    assert "num_blocks" in result.output
    assert "Traceback" not in result.output
    broken = tmp_path / "broken.toml"
    broken.write_text("num_blocks = = 3\n")
    result = _invoke_serve(["--config", str(broken)])
    assert result.exit_code == 2
    assert "not valid TOML" in result.output


def _invoke_serve(args: list[str]) -> Any:
    from stallkit.kits.cli import app

    return CliRunner().invoke(app, ["sim", "serve", *args])
