"""Against a client no one here wrote: AIPerf replays a trace `kit trace export` wrote, against
`kit sim serve`, and so does `kit load --trace`; the engine counts the same prompt and output
tokens for both (within 1 %).

AIPerf is found at $STALLKIT_AIPERF or on PATH (CI installs it into a virtual environment of
its own); without it the test is skipped with the reason. AIPerf sizes prompts with a
tokenizer: here a word-level one, the simulator's own count (a token is a word), placed in a
private Hugging Face cache so that nothing is fetched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from stallkit.contract.records import read_records
from stallkit.contract.trace import MooncakeLine, write_trace
from stallkit.engine import parse_spec
from stallkit.kits.arm.virtual import run_virtual_arm
from stallkit.kits.kit import load_kit
from stallkit.loadgen import mooncake_lines
from stallkit.loadgen.text import vocabulary
from tests.support import kit, served_sim

#: engine seconds per wall second of the served simulator (the trace's times are divided by it)
SCALE = 50.0
SMALL = {"load.duration_s": 90, "load.agents": 4, "load.shared_system_prompt": True,
         "load.min_context": 2000, "load.max_context": 6000, "load.system_prompt_tokens": 1024,
         "load.new_tokens_min": 200, "load.new_tokens_max": 1000,
         "load.reply_tokens_min": 20, "load.reply_tokens_max": 100}  # fmt: skip
TOKENIZER = "stallkit/words"


def _aiperf() -> str | None:
    return os.environ.get("STALLKIT_AIPERF") or shutil.which("aiperf")


pytestmark = [
    pytest.mark.skipif(
        _aiperf() is None,
        reason="AIPerf is not installed (pip install aiperf, or set STALLKIT_AIPERF to its aiperf)",
    ),
    pytest.mark.wallclock,
]


def _word_tokenizer(cache: Path) -> None:
    """A whitespace word-level tokenizer as a cached hub snapshot named TOKENIZER."""
    revision = "0" * 40
    repo = cache / ("models--" + TOKENIZER.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    vocab = {"[UNK]": 0} | {word: i + 1 for i, word in enumerate(vocabulary())}
    model = {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    body: dict[str, object] = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": None, "decoder": None, "model": model}  # fmt: skip
    (snapshot / "tokenizer.json").write_text(json.dumps(body))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}
    (snapshot / "tokenizer_config.json").write_text(json.dumps(config))


def _in_wall_time(line: MooncakeLine) -> MooncakeLine:
    times = {
        k: round(v / SCALE) for k in ("timestamp", "delay") if (v := getattr(line, k)) is not None
    }
    return line.model_copy(update=times)


def _served_tokens(url: str) -> tuple[float, float, float]:
    """(prompt tokens, generated tokens, finished requests) the engine counted."""
    page = httpx.get(url + "/metrics", timeout=10).text

    def total(name: str) -> float:
        return sum(float(m) for m in re.findall(rf"^vllm:{name}\{{[^}}]*\}} (\S+)$", page, re.M))

    return (
        total("prompt_tokens_total"),
        total("generation_tokens_total"),
        total("request_success_total"),
    )


def test_aiperf_and_stallkit_replay_the_same_trace_alike(tmp_path: Path) -> None:
    run_virtual_arm(
        load_kit("restore-stall", SMALL), "fix", parse_spec("sim:fix"), tmp_path / "arm"
    )
    lines = [_in_wall_time(x) for x in mooncake_lines(read_records(tmp_path / "arm"), 512)]
    trace = tmp_path / "trace.jsonl"
    write_trace(trace, lines)
    _word_tokenizer(tmp_path / "hub")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    aiperf = _aiperf()
    assert aiperf is not None
    with served_sim("--time-scale", str(SCALE)) as url:
        done = subprocess.run(
            [aiperf, "profile", "--model", "stallkit-sim", "--url", url, "--endpoint-type",
             "chat", "--streaming", "--input-file", str(trace), "--custom-dataset-type",
             "mooncake_trace", "--tokenizer", TOKENIZER, "--ui-type", "none",
             "--output-artifact-dir", str(tmp_path / "aiperf"), "--workers-max", "1",
             "--no-server-metrics", "--no-gpu-telemetry"],
            capture_output=True, text=True, timeout=150, env=env, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        theirs = _served_tokens(url)
    with served_sim("--time-scale", str(SCALE)) as url:
        done = kit("load", url, "--trace", str(trace), "--out", str(tmp_path / "ours"))
        assert done.returncode == 0, done.stderr[-3000:]
        ours = _served_tokens(url)
    assert theirs[2] == ours[2] == len(lines)  # every request finished, on both
    assert ours[1] == sum(x.output_length for x in lines)  # output lengths enforced
    assert abs(theirs[0] - ours[0]) <= 0.01 * ours[0], (theirs, ours)
    assert abs(theirs[1] - ours[1]) <= 0.01 * ours[1], (theirs, ours)
