"""Which simulated KV loads fail, and when their blocks are reported (pure, engine time as an
argument); SimpleCPUOffloadConnector passes the twin's connector check, a disk tier does not."""

from __future__ import annotations

import pytest

from stallkit.engine.errors import EngineError
from stallkit.engine.twin.kv.faults import LoadFaults
from stallkit.engine.twin.kv.settings import SUPPORTED_CONNECTORS, check_kv_transfer


def test_every_nth_load_fails_and_its_blocks_come_back_once_it_is_done() -> None:
    faults = LoadFaults(every=2)
    fails = [faults.on_load(done_s=float(i), block_ids=[10 * i, 10 * i + 1]) for i in range(1, 5)]
    assert fails == [False, True, False, True] and (faults.loads, faults.failed) == (4, 2)
    assert faults.due(1.5) == set()  # the failed load done at 2.0 is still in flight
    assert faults.due(2.0) == {20, 21}
    assert faults.due(3.0) == set()  # reported once
    assert faults.due(9.0) == {40, 41}


def test_no_load_fails_by_default() -> None:
    faults = LoadFaults(every=0)
    assert not any(faults.on_load(float(i), [i]) for i in range(10))
    assert faults.due(100.0) == set() and faults.failed == 0


def test_simple_cpu_offload_is_supported_but_not_its_disk_tier() -> None:
    simple = {"kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both"}
    assert "SimpleCPUOffloadConnector" in SUPPORTED_CONNECTORS
    check_kv_transfer(simple)
    disk = {**simple, "kv_connector_extra_config": {"kv_offload_backend": "disk"}}
    with pytest.raises(EngineError, match="CPU backend only") as caught:
        check_kv_transfer(disk)
    assert "\n" not in str(caught.value) and caught.value.hint


def test_other_connectors_are_still_one_line() -> None:
    with pytest.raises(EngineError, match="cannot run KV connector 'NixlConnector'") as caught:
        check_kv_transfer({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
    assert "\n" not in str(caught.value)
