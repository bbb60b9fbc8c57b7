"""vLLM's KV connectors inside the twin: the connector's own code, a simulated byte mover.

A twin arm whose engine arguments carry `--kv-transfer-config` builds that connector through
vLLM's own factory (its scheduler half inside the scheduler, its worker half beside it); only
the thing that moves bytes between the GPU pool and the host tier is simulated, as one link
per direction on engine time (`link.py`). `settings.py` is pure (no vLLM import); `worker.py`
and `driver.py` import vLLM and run only where a twin runs.
"""

from stallkit.engine.twin.kv.link import Link, Transfer
from stallkit.engine.twin.kv.settings import (
    SUPPORTED_CONNECTORS,
    check_kv_transfer,
    kv_transfer_from_args,
)

__all__ = [
    "SUPPORTED_CONNECTORS",
    "Link",
    "Transfer",
    "check_kv_transfer",
    "kv_transfer_from_args",
]
