"""Shared pieces of the twin's KV-connector tests: the connectors, a small twin whose every
turn evicts another agent's prefix, six conversations over it, and a kit that turns one on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.core import TwinEngine

REPO = Path(__file__).resolve().parents[2]
#: the connectors the twin runs, by name, as a kit's --kv-transfer-config gives them
CONNECTORS: dict[str, dict[str, Any]] = {
    name: {"kv_connector": name, "kv_role": "kv_both"}
    for name in ("OffloadingConnector", "SimpleCPUOffloadConnector")
}


def twin(connector: str, skip: bool = True, **fields: Any) -> TwinEngine:
    """24 blocks of 16 tokens for six agents of 100+ tokens: every turn evicts another's."""
    config = TwinConfig(
        num_blocks=24, block_size=16, max_num_seqs=4, max_num_batched_tokens=256,
        max_model_len=1024, empty_step_s=0.002, skip_empty_steps=skip,
        kv_transfer_config=CONNECTORS[connector], kv_seconds_per_block=0.02,
        kv_host_blocks=256, **fields,
    )  # fmt: skip
    return TwinEngine(config)


def conversations(engine: TwinEngine, turns: int = 3) -> tuple[float, set[str]]:
    """Six agents, `turns` turns each (every turn the last prompt plus 30 words); the engine
    time at the end, and the requests seen in vLLM's WAITING_FOR_REMOTE_KVS."""
    from vllm.v1.request import RequestStatus

    prompts = {a: [f"a{a}w{i}" for i in range(100)] for a in range(6)}
    remote: set[str] = set()
    t = 0.0
    for turn in range(turns):
        for a in range(6):
            engine.add_request(f"r{turn}-{a}", prompts[a], 8, t)
        while engine.has_work():
            t = engine.advance(t, t + 0.01).now_s
            for rid, request in engine._sched.requests.items():  # vLLM's own request state
                if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                    remote.add(rid)
        for a in range(6):
            prompts[a] += [f"x{turn}-{a}-{i}" for i in range(30)]
    return t, remote


def kv_kit(tmp_path: Path, connector: str) -> Path:
    """The cpu-patched kit, 10 engine s, with `connector` in its engine arguments."""
    text = (REPO / "kits" / "shipped" / "cpu-patched.toml").read_text(encoding="utf-8")
    flag = json.dumps(json.dumps(CONNECTORS[connector]))
    text = text.replace(
        "engine_args = [\n", f'engine_args = [\n  "--kv-transfer-config", {flag},\n', 1
    )
    text = text.replace(
        "[twin]\n", "[twin]\nkv_seconds_per_block = 0.002\nkv_host_blocks = 64\n", 1
    )
    text = text.replace("duration_s = 60", "duration_s = 10", 1)
    path = tmp_path / "twin-kv.toml"
    path.write_text(text, encoding="utf-8")
    return path
