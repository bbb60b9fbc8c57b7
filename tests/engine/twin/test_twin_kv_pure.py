"""The twin's KV-connector parts that need no vLLM: the host link's timing, the
`--kv-transfer-config` it reads from a kit's engine arguments, and its refusals (a host link
that could never move a block, a host tier of no block)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from stallkit.engine.errors import EngineError
from stallkit.engine.spec import TwinSpec
from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.kv import Link, kv_transfer_from_args
from stallkit.engine.twin.kv.settings import check_host_tier, host_capacity
from stallkit.kits.arm.kinds import twin_config
from stallkit.kits.errors import KitError
from stallkit.kits.kit import load_kit
from tests.support import kit, one_error_line

OFFLOAD = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}
STOCK = TwinSpec(raw="twin:stock", scheduler="stock")


def test_a_link_moves_transfers_in_order_each_after_the_last() -> None:
    link = Link(latency_s=0.5, seconds_per_block=0.25)
    first = link.submit(1, blocks=4, now_s=10.0)  # starts at once: 10 + 0.5 + 1.0
    second = link.submit(2, blocks=2, now_s=10.0)  # queues behind it: 11.5 + 0.5 + 0.5
    assert (first.done_s, second.done_s) == (11.5, 12.5)
    assert link.next_done_s == 11.5 and link.done_s({2}) == 12.5 and link.done_s({9}) is None
    assert link.finished(11.49) == [] and [t.job_id for t in link.finished(11.5)] == [1]
    later = link.submit(3, blocks=0, now_s=20.0)  # an idle link starts a transfer at once
    assert later.done_s == 20.5
    assert [t.job_id for t in link.finished(30.0)] == [2, 3] and link.next_done_s is None
    assert (link.submitted, link.blocks, link.pending) == (3, 6, 0)


@pytest.mark.parametrize(
    "args",
    [
        ["--kv-transfer-config", json.dumps(OFFLOAD)],
        ["--max-num-seqs", "2", f"--kv-transfer-config={json.dumps(OFFLOAD)}"],
        ["--kv_transfer_config", json.dumps(OFFLOAD)],
    ],
)
def test_the_kv_transfer_config_is_read_as_vllm_takes_it(args: list[str]) -> None:
    assert kv_transfer_from_args(args) == OFFLOAD


def test_no_kv_transfer_config_is_none() -> None:
    assert kv_transfer_from_args(["--max-num-seqs", "2", "--block-size", "16"]) is None


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "is not a JSON object"),
        ('{"kv_connector": "NixlConnector", "kv_role": "kv_both"}', "'NixlConnector'"),
        (  # vLLM's own copy of LMCache's adapter (or lmcache missing): refused either way
            '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",'
            ' "kv_connector_extra_config": {"use_native": true}}',
            "LMCacheConnectorV1",
        ),
        (
            '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",'
            ' "kv_connector_module_path": "my.mod"}',
            "out-of-tree",
        ),
        ('{"kv_connector": "OffloadingConnector"}', "no kv_role"),
        (
            '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",'
            ' "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec"}}',
            "CPUOffloadingSpec only",
        ),
    ],
)
def test_a_connector_the_twin_cannot_run_is_refused(config: str, message: str) -> None:
    with pytest.raises(EngineError, match=message) as caught:
        kv_transfer_from_args(["--kv-transfer-config", config])
    assert caught.value.hint and "\n" not in str(caught.value)


def _kit_with(tmp_path: Path, connector: str, twin: str = "") -> Path:
    text = (Path(__file__).parents[3] / "kits" / "shipped" / "cpu-patched.toml").read_text()
    args = f'"--kv-transfer-config", {json.dumps(connector)},\n'
    text = text.replace("engine_args = [\n", f"engine_args = [\n  {args}", 1)
    text = text.replace("[twin]\n", f"[twin]\n{twin}", 1)
    path = tmp_path / "kv.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_kit_gives_its_twin_the_connector_and_the_host_link(tmp_path: Path) -> None:
    path = _kit_with(tmp_path, json.dumps(OFFLOAD), "kv_seconds_per_block = 0.002\n")
    config = twin_config(load_kit(str(path)), STOCK, "base")
    assert config.kv_transfer_config == OFFLOAD and config.kv_seconds_per_block == 0.002
    default = TwinConfig()
    assert config.kv_host_blocks == default.kv_host_blocks
    assert config.kv_link_latency_s == default.kv_link_latency_s
    plain = twin_config(load_kit("cpu-patched"), STOCK, "base")
    assert plain.kv_transfer_config is None


def test_a_kit_naming_a_connector_the_twin_cannot_run_is_a_kit_error(tmp_path: Path) -> None:
    path = _kit_with(tmp_path, '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}')
    with pytest.raises(KitError, match=r"base: \[engine\] engine_args: .*'NixlConnector'"):
        twin_config(load_kit(str(path)), STOCK, "base")


@pytest.mark.skipif(  # without vLLM, the line saying so comes first
    importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"
)
def test_kit_ab_refuses_a_bad_connector_in_one_line(tmp_path: Path) -> None:
    path = _kit_with(tmp_path, '{"kv_connector": "NoSuchConnector", "kv_role": "kv_both"}')
    done = kit("ab", "--base", "twin:stock", "--fix", "twin:stock", "--kit", str(path), "--dry-run")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "'NoSuchConnector'" in lines[0] and "OffloadingConnector" in lines[0]


@pytest.mark.parametrize("setting", ["kv_seconds_per_block", "kv_link_latency_s"])
def test_a_host_link_that_could_never_move_a_block_is_refused_before_the_run(
    tmp_path: Path, setting: str
) -> None:
    path = _kit_with(tmp_path, json.dumps(OFFLOAD), f"{setting} = inf\n")
    with pytest.raises(KitError, match=rf"twin.{setting}: inf engine seconds: .*never move"):
        load_kit(str(path))
    done = kit("ab", "--base", "twin:stock", "--fix", "twin:stock", "--kit", str(path), "--dry-run")
    line = one_error_line(done)
    assert f"twin.{setting}" in line and "could never move a block" in line


def test_a_host_tier_of_no_block_is_refused_naming_the_setting() -> None:
    with pytest.raises(EngineError) as refused:
        check_host_tier("OffloadingConnector", 0, 65536)
    assert "host tier holds 0 blocks" in refused.value.message
    assert "cpu_bytes_to_use = 65536, from [twin] kv_host_blocks" in refused.value.message
    assert "\n" not in refused.value.message
    check_host_tier("OffloadingConnector", 1, 65536)  # a block is a tier
    check_host_tier("OffloadingConnector", None, 65536)  # a release that does not say


def test_the_host_tiers_size_is_read_where_a_release_keeps_it() -> None:
    class Manager:  # vLLM 0.32's CPU manager keeps its chunks private
        _num_chunks = 12

    class Spec:
        num_blocks = 7

    assert host_capacity(None, Manager()) == 12
    assert host_capacity(object(), Spec()) == 7
    assert host_capacity(object()) is None
