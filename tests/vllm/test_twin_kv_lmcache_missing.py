"""A kit that names LMCacheConnectorV1 where lmcache is not installed: one line, exit 2, the
install command as the hint, before any arm runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stallkit.engine.errors import EngineError
from stallkit.engine.twin.kv.settings import LMCACHE_INSTALL, check_kv_transfer, lmcache_installed
from stallkit.kits.cli import app
from tests.vllm.conftest import HAVE_VLLM, VLLM_MISSING
from tests.vllm.twin_kv_support import REPO

KIT = REPO / "kits" / "corpus" / "kits" / "lmcache-3014.toml"


@pytest.fixture
def no_lmcache(monkeypatch: pytest.MonkeyPatch) -> None:
    """lmcache cannot be found in this process (a None in sys.modules hides a package)."""
    monkeypatch.setitem(sys.modules, "lmcache", None)


@pytest.mark.usefixtures("no_lmcache")
def test_the_connector_without_lmcache_is_one_line_with_the_install_command() -> None:
    with pytest.raises(EngineError, match="needs the lmcache package") as caught:
        check_kv_transfer({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    assert "\n" not in str(caught.value) and LMCACHE_INSTALL in caught.value.hint


@pytest.mark.usefixtures("no_lmcache")
@pytest.mark.skipif(not HAVE_VLLM, reason=VLLM_MISSING)  # without vLLM, that line comes first
def test_kit_ab_refuses_the_lmcache_kit_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["ab", "--kit", str(KIT), "--base", "twin:stock", "--fix", "twin:stock"]
    done = CliRunner().invoke(app, [*argv, "--seeds", "1", "--out", "run"])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.exit_code == 2, done.output
    assert len(lines) == 1 and "needs the lmcache package" in lines[0], lines
    assert LMCACHE_INSTALL in lines[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not lmcache_installed(), reason="lmcache is not installed")
def test_lmcache_settings_the_twin_cannot_run_are_one_line() -> None:
    extra = {"lmcache.enable_async_loading": True}
    config = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    with pytest.raises(EngineError, match="asynchronous loads") as caught:
        check_kv_transfer({**config, "kv_connector_extra_config": extra})
    assert "\n" not in str(caught.value) and "enable_async_loading" in caught.value.hint
